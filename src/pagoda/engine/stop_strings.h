// Stop strings over streamed text: text that could be the start of a stop string is held back until the
// next deltas show it is not; at a match the text ends just before the stop string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop);

  struct Result {
    std::string emit;                  // text safe to output now
    std::optional<std::string> match;  // the stop string found (earliest in the text; output ends before it)
  };
  // Appends `delta`. After a match nothing more is emitted.
  Result add(std::string_view delta);
  // The held-back text (at the end of a generation that did not stop on a string).
  std::string flush();
  // All text emitted so far.
  std::string_view emitted() const { return std::string_view(text_).substr(0, emitted_); }

 private:
  std::vector<std::string> stop_;
  size_t hold_ = 0;  // longest stop string - 1 bytes
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace pagoda
