// engine/StopStringFilter: hold-back of text that may start a stop string, matches split over deltas,
// the earliest of several stop strings, and UTF-8 characters never split.
#include "pagoda/engine/stop_strings.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

// The last (longest stop string - 1) bytes are held back, whatever they are: cheap and streaming-safe.
TEST(StopStringFilter, HoldsBackTheLongestStopStringLessOneBytes) {
  StopStringFilter f({"STOP"});
  EXPECT_EQ(f.add("hello").emit, "he");
  EXPECT_EQ(f.add(" wor").emit, "llo ");
  auto r = f.add("ld ST");
  EXPECT_EQ(r.emit, "world");
  EXPECT_FALSE(r.match);
  r = f.add("OP and more");  // the match straddles two deltas
  EXPECT_EQ(r.emit, " ");
  EXPECT_EQ(r.match, "STOP");
  EXPECT_EQ(f.emitted(), "hello world ");
  EXPECT_EQ(f.add("x").emit, "");  // nothing after a match
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStringFilter, EarliestMatchWinsAndFlushReturnsTheRest) {
  StopStringFilter f({"cd", "bcdef"});
  auto r = f.add("abcdefg");
  EXPECT_EQ(r.match, "bcdef");
  EXPECT_EQ(r.emit, "a");
  StopStringFilter g({"zz"});
  EXPECT_EQ(g.add("abc").emit, "ab");
  EXPECT_EQ(g.flush(), "c");
  StopStringFilter none({});
  EXPECT_EQ(none.add("abc").emit, "abc");
  EXPECT_EQ(none.flush(), "");
  StopStringFilter empty({""});  // an empty stop string is ignored
  EXPECT_EQ(empty.add("abc").emit, "abc");
}

TEST(StopStringFilter, NeverSplitsAUtf8Character) {
  StopStringFilter f({"xy"});  // holds back 1 byte
  auto r = f.add("a\xC3\xA9");  // "aé": holding the last byte would split é
  EXPECT_EQ(r.emit, "a");
  r = f.add("b");
  EXPECT_EQ(r.emit, "\xC3\xA9");
  EXPECT_EQ(f.flush(), "b");
}

}  // namespace
}  // namespace pagoda
