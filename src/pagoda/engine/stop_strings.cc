#include "pagoda/engine/stop_strings.h"

#include <algorithm>

namespace pagoda {

StopStringFilter::StopStringFilter(std::vector<std::string> stop) {
  for (auto& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
  for (const auto& s : stop_) hold_ = std::max(hold_, s.size() - 1);
}

StopStringFilter::Result StopStringFilter::add(std::string_view delta) {
  Result r;
  if (stopped_) return r;
  const size_t old = text_.size();
  text_.append(delta);
  size_t cut = std::string::npos;
  for (const auto& s : stop_) {
    // A match not found before must end in the new text.
    const size_t from = old >= s.size() ? old - s.size() + 1 : 0;
    const size_t pos = text_.find(s, from);
    if (pos != std::string::npos && pos < cut) {
      cut = pos;
      r.match = s;
    }
  }
  if (r.match) {
    stopped_ = true;
    const size_t end = std::max(cut, emitted_);  // never takes back what was emitted
    r.emit = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    text_.resize(end);
    return r;
  }
  size_t safe = text_.size() >= hold_ ? text_.size() - hold_ : 0;
  // Never split a UTF-8 character.
  while (safe > emitted_ && safe < text_.size() && (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80) --safe;
  if (safe > emitted_) {
    r.emit = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return r;
}

std::string StopStringFilter::flush() {
  if (stopped_) return "";
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace pagoda
