#include "pagoda/hub/progress.h"

#include <unistd.h>

#include <cstdio>

#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"

namespace pagoda {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);  // 10 Hz: smooth, negligible cost
// Without a terminal, a file this large (or of unknown size) also gets a line when it starts, so a long
// silent wait in a log is explained; small files get only the line when they are done.
constexpr long long kAnnounceBytes = 16LL << 20;

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

}  // namespace

std::string format_progress_line(const std::string& name, long long done, long long total, double bytes_per_s) {
  std::string line = str_cat(name, "  ", format_bytes(static_cast<double>(done)));
  if (total >= 0) line += str_cat(" / ", format_bytes(static_cast<double>(total)));
  line += str_cat("  ", fixed1(bytes_per_s / 1e6), " MB/s");
  if (total > 0) {
    long long pct = done >= total ? 100 : done * 100 / total;
    line += str_cat("  ", pct, "%");
  }
  return line;
}

DownloadProgress::DownloadProgress(std::string name, long long total, long long already, bool enabled)
    : name_(std::move(name)),
      total_(total),
      done_(already),
      enabled_(enabled),
      tty_(enabled && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (!enabled_) return;
  if (tty_) {
    draw(true);
  } else if (total_ < 0 || total_ >= kAnnounceBytes || already > 0) {
    std::string size = total_ >= 0 ? format_bytes(static_cast<double>(total_)) : std::string("unknown size");
    std::string resume = already > 0 ? str_cat(", resuming at ", format_bytes(static_cast<double>(already))) : "";
    PAGODA_LOG_INFO("downloading ", name_, " (", size, resume, ")");
  }
}

DownloadProgress::~DownloadProgress() {
  if (!finished_) finish(false);
}

void DownloadProgress::restart(long long already) {
  done_ = already;
  session_bytes_ = 0;
  start_ = std::chrono::steady_clock::now();
}

void DownloadProgress::add(long long bytes) {
  done_ += bytes;
  session_bytes_ += bytes;
  if (tty_) draw(false);
}

double DownloadProgress::speed() const {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return secs > 0 ? static_cast<double>(session_bytes_) / secs : 0.0;
}

void DownloadProgress::draw(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  // \r and clear-to-end-of-line: the bar redraws in place.
  std::fprintf(stderr, "\r%s\033[K", format_progress_line(name_, done_, total_, speed()).c_str());
  std::fflush(stderr);
}

void DownloadProgress::finish(bool ok) {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  if (tty_) {
    draw(true);
    std::fputs(ok ? "\n" : "  (interrupted)\n", stderr);
    std::fflush(stderr);
    return;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (ok) {
    PAGODA_LOG_INFO("downloaded ", name_, ": ", format_bytes(static_cast<double>(done_)), " in ", fixed1(secs), " s (",
                    fixed1(speed() / 1e6), " MB/s)");
  }
}

}  // namespace pagoda
