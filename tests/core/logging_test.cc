#include "pagoda/core/logging.h"

#include <regex>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Logging, LineFormat) {
  std::string line = format_log_line(LogLevel::kInfo, "/x/y/selector.cc", 212, "hello");
  EXPECT_TRUE(std::regex_match(line, std::regex(R"(INFO \d\d-\d\d \d\d:\d\d:\d\d \[selector\.cc:212\] hello)"))) << line;
  line = format_log_line(LogLevel::kWarning, "a.cc", 1, "w");
  EXPECT_TRUE(std::regex_match(line, std::regex(R"(WARNING \d\d-\d\d \d\d:\d\d:\d\d \[a\.cc:1\] w)"))) << line;
}

TEST(Logging, CaptureSeesAllLevels) {
  set_log_level(LogLevel::kError);
  LogCapture cap;
  PAGODA_LOG_DEBUG("d ", 1);
  PAGODA_LOG_INFO("i");
  auto r = cap.records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].level, LogLevel::kDebug);
  EXPECT_EQ(r[0].message, "d 1");
  set_log_level(LogLevel::kInfo);
}

TEST(Logging, LevelNames) {
  EXPECT_EQ(log_level_from_name("debug"), LogLevel::kDebug);
  EXPECT_EQ(log_level_from_name("WARNING"), LogLevel::kWarning);
  EXPECT_FALSE(log_level_from_name("LOUD").has_value());
}

}  // namespace
}  // namespace pagoda
