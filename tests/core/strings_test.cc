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

}  // namespace
}  // namespace pagoda
