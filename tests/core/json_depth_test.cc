#include "pagoda/core/json_depth.h"

#include <string>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::string nested(int depth, char open, char close) { return std::string(size_t(depth), open) + std::string(size_t(depth), close); }

TEST(JsonDepth, AcceptsUpToTheLimit) {
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth, '[', ']'), "body"));
  EXPECT_NO_THROW(check_json_depth(R"({"a": [1, {"b": [2]}], "c": "x"})", "body", 4));
  // Siblings do not add up: depth is the deepest path, not the count of brackets.
  EXPECT_NO_THROW(check_json_depth("[[1],[2],[3],[4],[5]]", "body", 2));
}

TEST(JsonDepth, RefusesDeeperTextNamingItAndTheOffset) {
  try {
    check_json_depth(nested(100000, '[', ']'), "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()), "config.json: JSON nested deeper than 128 levels (at byte 128)");
  }
  EXPECT_THROW(check_json_depth(R"({"a":{"b":{"c":1}}})", "x", 2), Error);
  EXPECT_THROW(check_json_depth("[{[{[", "x", 4), Error);  // unterminated text is bounded too
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  EXPECT_NO_THROW(check_json_depth(R"(["[[[[[[", "{{{{\"[[[["])", "body", 1));
  // An escaped quote does not end the string; the brackets after it are still inside it.
  EXPECT_NO_THROW(check_json_depth(R"(["\"[[[[[[[["])", "body", 1));
  EXPECT_THROW(check_json_depth(R"(["\\", [[1]]])", "body", 2), Error);  // "\\" ends: the brackets count
}

}  // namespace
}  // namespace pagoda
