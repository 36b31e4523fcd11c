// Logging in the format `LEVEL MM-DD HH:MM:SS [file:line] message` (local time), to stderr.
//
// The threshold comes from --log-level or PAGODA_LOGGING_LEVEL (default INFO). A LogCapture records every
// line emitted while it lives, at all levels and regardless of the threshold (the explain command's JSON
// `log` field is built from it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/core/strings.h"

namespace pagoda {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

std::string_view log_level_name(LogLevel l);
std::optional<LogLevel> log_level_from_name(std::string_view name);  // case-insensitive

struct LogRecord {
  LogLevel level;
  std::string message;  // without the prefix
};

void set_log_level(LogLevel l);
LogLevel log_level();
// Applies PAGODA_LOGGING_LEVEL if set; throws a config error for an unknown value.
void init_log_level_from_env();
// Formats one line with its prefix (exposed for tests).
std::string format_log_line(LogLevel l, const char* file, int line, std::string_view message);
void log_message(LogLevel l, const char* file, int line, std::string_view message);

// Where printed lines go instead of stderr: the Python module forwards them to Python's `logging`. The sink
// gets the lines that pass the threshold and no LogSilence, unformatted, on the thread that logged them,
// outside the logging lock (so it may block, e.g. on Python's GIL). nullptr: stderr again.
using LogSink = void (*)(LogLevel level, const char* file, int line, std::string_view message);
void set_log_sink(LogSink sink);

// Records every message logged on any thread while it is alive. Captures nest; each sees all lines.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<LogRecord> records() const;

 private:
  friend void log_message(LogLevel, const char*, int, std::string_view);
  std::vector<LogRecord> records_;
};

// Suppresses stderr output while alive (lines are still captured). Used by --json modes.
class LogSilence {
 public:
  LogSilence();
  ~LogSilence();
  LogSilence(const LogSilence&) = delete;
  LogSilence& operator=(const LogSilence&) = delete;
};

}  // namespace pagoda

#define PAGODA_LOG(level, ...) ::pagoda::log_message(::pagoda::LogLevel::level, __FILE__, __LINE__, ::pagoda::str_cat(__VA_ARGS__))
#define PAGODA_LOG_DEBUG(...) PAGODA_LOG(kDebug, __VA_ARGS__)
#define PAGODA_LOG_INFO(...) PAGODA_LOG(kInfo, __VA_ARGS__)
#define PAGODA_LOG_WARNING(...) PAGODA_LOG(kWarning, __VA_ARGS__)
#define PAGODA_LOG_ERROR(...) PAGODA_LOG(kError, __VA_ARGS__)
