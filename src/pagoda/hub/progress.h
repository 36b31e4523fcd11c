// Download progress on stderr: a redrawn bar when stderr is a terminal, otherwise a log line when a file
// ends (and one when a large file starts), so CI logs and redirected output stay readable.
#pragma once

#include <chrono>
#include <string>

namespace pagoda {

// One bar line: "model.safetensors  12.0 MiB / 48.0 MiB  35.2 MB/s  25%". total < 0: size unknown.
std::string format_progress_line(const std::string& name, long long done, long long total, double bytes_per_s);

class DownloadProgress {
 public:
  // `already` bytes came from an earlier partial download (counted in done, not in the speed).
  DownloadProgress(std::string name, long long total, long long already, bool enabled);
  ~DownloadProgress();
  DownloadProgress(const DownloadProgress&) = delete;
  DownloadProgress& operator=(const DownloadProgress&) = delete;

  void restart(long long already);  // the server ignored a resume: counting starts over
  void add(long long bytes);
  void finish(bool ok);

 private:
  void draw(bool force);
  double speed() const;

  std::string name_;
  long long total_;
  long long done_;
  long long session_bytes_ = 0;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace pagoda
