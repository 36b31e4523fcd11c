#include "pagoda/core/logging.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::atomic<int> g_level{int(LogLevel::kInfo)};
std::atomic<int> g_silence{0};
std::atomic<LogSink> g_sink{nullptr};
std::mutex g_mu;
std::vector<LogCapture*>& captures() {
  static std::vector<LogCapture*> c;
  return c;
}

}  // namespace

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

std::optional<LogLevel> log_level_from_name(std::string_view name) {
  std::string u = to_upper(name);
  if (u == "DEBUG") return LogLevel::kDebug;
  if (u == "INFO") return LogLevel::kInfo;
  if (u == "WARNING" || u == "WARN") return LogLevel::kWarning;
  if (u == "ERROR") return LogLevel::kError;
  return std::nullopt;
}

void set_log_level(LogLevel l) { g_level = int(l); }
LogLevel log_level() { return LogLevel(g_level.load()); }

void init_log_level_from_env() {
  const char* v = std::getenv("PAGODA_LOGGING_LEVEL");
  if (!v || !*v) return;
  std::string_view value = v;
  auto l = log_level_from_name(value);
  if (!l || value != log_level_name(*l))
    throw_config_error("Invalid value '", v, "' for PAGODA_LOGGING_LEVEL. Valid options: ['DEBUG', 'INFO', 'WARNING', 'ERROR'].");
  set_log_level(*l);
}

std::string format_log_line(LogLevel l, const char* file, int line, std::string_view message) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%m-%d %H:%M:%S", &tm);
  return str_cat(log_level_name(l), " ", ts, " [", base, ":", line, "] ", message);
}

void set_log_sink(LogSink sink) { g_sink = sink; }

void log_message(LogLevel l, const char* file, int line, std::string_view message) {
  LogSink sink = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (LogCapture* c : captures()) c->records_.push_back({l, std::string(message)});
    if (int(l) < g_level.load() || g_silence.load() > 0) return;
    sink = g_sink.load();
    if (!sink) {
      std::string text = format_log_line(l, file, line, message);
      text += '\n';
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
      return;
    }
  }
  sink(l, file, line, message);
}

LogCapture::LogCapture() {
  std::lock_guard<std::mutex> lock(g_mu);
  captures().push_back(this);
}

LogCapture::~LogCapture() {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& c = captures();
  c.erase(std::remove(c.begin(), c.end(), this), c.end());
}

std::vector<LogRecord> LogCapture::records() const {
  std::lock_guard<std::mutex> lock(g_mu);
  return records_;
}

LogSilence::LogSilence() { ++g_silence; }
LogSilence::~LogSilence() { --g_silence; }

}  // namespace pagoda
