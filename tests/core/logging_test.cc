#include "pagoda/core/logging.h"

#include <regex>
#include <string>
#include <vector>

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

std::vector<std::string> g_sunk;
void record_line(LogLevel level, const char* file, int line, std::string_view message) {
  g_sunk.push_back(std::string(log_level_name(level)) + " " + file + ":" + std::to_string(line) + " " + std::string(message));
}

TEST(Logging, SinkGetsPrintedLinesOnly) {
  set_log_level(LogLevel::kInfo);
  set_log_sink(&record_line);
  g_sunk.clear();
  LogCapture cap;
  PAGODA_LOG_DEBUG("below the threshold");
  log_message(LogLevel::kWarning, "w.cc", 7, "to the sink");
  {
    LogSilence quiet;
    PAGODA_LOG_ERROR("silenced");
  }
  set_log_sink(nullptr);
  PAGODA_LOG_INFO("to stderr again");
  EXPECT_EQ(g_sunk, std::vector<std::string>{"WARNING w.cc:7 to the sink"});
  EXPECT_EQ(cap.records().size(), 4u);  // captures see every line, sink or not
}

TEST(Logging, LevelNames) {
  EXPECT_EQ(log_level_from_name("debug"), LogLevel::kDebug);
  EXPECT_EQ(log_level_from_name("WARNING"), LogLevel::kWarning);
  EXPECT_FALSE(log_level_from_name("LOUD").has_value());
}

}  // namespace
}  // namespace pagoda
