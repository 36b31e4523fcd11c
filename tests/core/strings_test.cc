#include "pagoda/core/strings.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Strings, PyListAndJoin) {
  EXPECT_EQ(py_str_list({"FLASH_ATTN", "FLASHINFER"}), "['FLASH_ATTN', 'FLASHINFER']");
  EXPECT_EQ(py_str_list({}), "[]");
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
}

TEST(Strings, ParseInt) {
  long long v = 0;
  EXPECT_TRUE(parse_int64("16", &v));
  EXPECT_EQ(v, 16);
  EXPECT_FALSE(parse_int64("16x", &v));
  EXPECT_FALSE(parse_int64("", &v));
  EXPECT_FALSE(parse_int64("1.5", &v));
}

TEST(Strings, SplitTrimCase) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(to_upper("flashinfer"), "FLASHINFER");
}

TEST(Strings, TextPreviewIsOneShortLine) {
  EXPECT_EQ(text_preview("silu"), "silu");
  EXPECT_EQ(text_preview("a\nb\tc\x01"), "a\\nb\\tc\\x01");
  EXPECT_EQ(text_preview(std::string(100000, 'x'), 10), "xxxxxxxxxx ... (100000 bytes)");
  // The cut never splits a UTF-8 character: "é" is two bytes, so 3 bytes keep "a" and one "é".
  EXPECT_EQ(text_preview("a\xC3\xA9\xC3\xA9", 4), "a\xC3\xA9 ... (5 bytes)");
}

}  // namespace
}  // namespace pagoda
