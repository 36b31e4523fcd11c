#include "pagoda/core/json_checks.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/read_file.h"

namespace pagoda {
namespace {

using nlohmann::json;

TEST(JsonChecks, PreviewNamesTheTypeAndNeverDumpsAContainer) {
  EXPECT_EQ(json_preview(json("gelu")), "the string \"gelu\"");
  EXPECT_EQ(json_preview(json(1.5)), "the number 1.5");
  EXPECT_EQ(json_preview(json(nullptr)), "null");
  EXPECT_EQ(json_preview(json(true)), "true");
  EXPECT_EQ(json_preview(json::array({1, 2, 3})), "a list of 3 items");
  EXPECT_EQ(json_preview(json::object({{"a", 1}})), "an object of 1 key");
  EXPECT_EQ(json_preview(nlohmann::ordered_json::array()), "a list of 0 items");
  // A deep value is described without recursion.
  json deep = 1;
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  EXPECT_EQ(json_preview(deep), "a list of 1 item");
  const std::string long_preview = json_preview(json(std::string(1 << 20, 'a')));
  EXPECT_LT(long_preview.size(), 100u);
}

TEST(JsonChecks, IntegralAcceptsIntegersAndIntegralFloatsOnly) {
  EXPECT_EQ(json_integral(json(7)), 7);
  EXPECT_EQ(json_integral(json(-1)), -1);
  EXPECT_EQ(json_integral(json(4096.0)), 4096);
  EXPECT_EQ(json_integral(json::parse("1e9")), 1000000000);
  EXPECT_EQ(json_integral(json::parse("1099511627776")), int64_t(1) << 40);
  EXPECT_EQ(json_integral(json::parse("9223372036854775807")), INT64_MAX);
  EXPECT_EQ(json_integral(json::parse("18446744073709551615")), std::nullopt);  // above int64
  EXPECT_EQ(json_integral(json::parse("1e30")), std::nullopt);
  EXPECT_EQ(json_integral(json(1.5)), std::nullopt);
  EXPECT_EQ(json_integral(json("8")), std::nullopt);
  EXPECT_EQ(json_integral(json(true)), std::nullopt);
  EXPECT_EQ(json_integral(json(nullptr)), std::nullopt);
}

TEST(ReadUserFile, RefusesFilesAboveTheLimitAndNonRegularFiles) {
  const auto path = std::filesystem::temp_directory_path() / "pagoda_read_user_file_test.json";
  std::ofstream(path) << std::string(2000, ' ') << "{}";
  EXPECT_EQ(read_user_file(path.string(), 4096).size(), 2002u);
  try {
    read_user_file(path.string(), 1000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  EXPECT_THROW(read_user_file("/dev/zero", kMaxConfigFileBytes), Error);  // never read to the end
  try {
    read_user_file("/nonexistent/config.json", kMaxConfigFileBytes);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
  }
}

}  // namespace
}  // namespace pagoda
