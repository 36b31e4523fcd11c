#include "pagoda/core/utf8.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(TerminalSafe, KeepsPrintableTextTabsAndNewlines) {
  EXPECT_EQ(terminal_safe("Paris is the capital.\n\tÉté 東京 🙂"), "Paris is the capital.\n\tÉté 東京 🙂");
  EXPECT_EQ(terminal_safe(""), "");
}

TEST(TerminalSafe, ReplacesControlCharacters) {
  // ESC ( 0 switches a VT100 to the line-drawing set; ESC [ 2 J clears the screen; SO/SI shift sets.
  EXPECT_EQ(terminal_safe("a\x1b(0b"), "a\xEF\xBF\xBD(0b");
  EXPECT_EQ(terminal_safe("\x1b[2J"), "\xEF\xBF\xBD[2J");
  EXPECT_EQ(terminal_safe(std::string("\x0e\x0f\x07\x00", 4)), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(terminal_safe("x\x7fy"), "x\xEF\xBF\xBDy");
  // C1 controls are two-byte UTF-8 (U+009B is CSI on some terminals).
  EXPECT_EQ(terminal_safe("\xc2\x9b" "31m"), "\xEF\xBF\xBD" "31m");
  EXPECT_EQ(terminal_safe("\xc2\xa0"), "\xc2\xa0");  // U+00A0, the first printable after C1
}

TEST(TerminalSafe, DropsCarriageReturn) {
  EXPECT_EQ(terminal_safe("line\r\nnext\rover"), "line\nnextover");
}

TEST(TerminalSafe, ReplacesInvalidUtf8) {
  EXPECT_EQ(terminal_safe("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(terminal_safe("\xe6\x9d"), "\xEF\xBF\xBD");        // truncated sequence: one maximal subpart
  EXPECT_EQ(terminal_safe("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: 3 subparts
  // Every byte value alone: the output is valid UTF-8 with no control byte but \t and \n.
  for (int b = 0; b < 256; ++b) {
    std::string out = terminal_safe(std::string(1, char(b)));
    EXPECT_TRUE(utf8_is_valid(out)) << b;
    for (unsigned char c : out) EXPECT_TRUE(c >= 0x20 || c == '\t' || c == '\n') << b;
  }
}

}  // namespace
}  // namespace pagoda
