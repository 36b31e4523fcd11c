// Spec §9.4: argument pre-processing on its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/config/arg_preprocess.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

using testing::ElementsAre;

bool takes_value(std::string_view n) { return n != "--batch-invariant" && n != "--json" && n != "--sinks"; }

PreprocessedArgs pre(const std::vector<std::string>& a, std::vector<LogRecord>* log = nullptr) {
  LogCapture cap;
  LogSilence quiet;
  auto r = preprocess_args(a, takes_value);
  if (log) *log = cap.records();
  return r;
}

TEST(Preprocess, DashesBeforeTheFirstDot) {
  auto r = pre({"--attention_backend", "FLASH_ATTN", "--attention_config.flash_attn_version", "3"});
  EXPECT_THAT(r.args, ElementsAre("--attention-backend", "FLASH_ATTN", "--attention-config", R"({"flash_attn_version":3})"));
  // Keys after the dot are kept verbatim.
  r = pre({"--attention-config.flash-attn-version", "3"});
  EXPECT_THAT(r.args, ElementsAre("--attention-config", R"({"flash-attn-version":3})"));
  // Single-dash options are not changed.
  r = pre({"-ac.use_non_causal=true"});
  EXPECT_THAT(r.args, ElementsAre("-ac", R"({"use_non_causal":true})"));
}

TEST(Preprocess, ValuesJsonThenHumanReadableThenRaw) {
  auto r = pre({"-ac.a", "true", "-ac.b", "3", "-ac.c", "null", "-ac.d", "\"x\"", "-ac.e", "25.6k", "-ac.f", "2K",
                "-ac.g", "FLASH_ATTN", "-ac.h", "1.5K"});
  EXPECT_THAT(r.args, ElementsAre("-ac", R"({"a":true,"b":3,"c":null,"d":"x","e":25600,"f":2048,"g":"FLASH_ATTN","h":"1.5K"})"));
  long long v = 0;
  EXPECT_TRUE(parse_human_readable_int("1m", &v));
  EXPECT_EQ(v, 1000000);
  EXPECT_TRUE(parse_human_readable_int("1G", &v));
  EXPECT_EQ(v, 1073741824);
  EXPECT_FALSE(parse_human_readable_int("12", &v));
}

TEST(Preprocess, MergeNestedAppendAndOrder) {
  auto r = pre({"--model", "m", "--attention-config.backend_per_kind.sliding_window", "TRITON_ATTN",
                "-ac.use_non_causal", "1", "--attention-config.backend=FLASHINFER", "--json",
                "--attention-config.list+", "a,b", "--attention-config.list+", "c"});
  EXPECT_THAT(r.args, ElementsAre("--model", "m", "--json", "--attention-config",
                                  R"({"backend_per_kind":{"sliding_window":"TRITON_ATTN"},"backend":"FLASHINFER","list":["a","b","c"]})",
                                  "-ac", R"({"use_non_causal":1})"));
  EXPECT_TRUE(r.duplicates.empty());
}

TEST(Preprocess, DuplicatesWarning) {
  std::vector<LogRecord> log;
  auto r = pre({"--attention-backend", "A", "--attention-config.backend", "X", "--attention_backend", "B",
                "--attention-config.backend", "Y", "--block-size=16", "--block-size", "32"},
               &log);
  EXPECT_THAT(r.duplicates, ElementsAre("--attention-backend", "--attention-config.backend", "--block-size"));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].level, LogLevel::kWarning);
  // Names in the order found.
  EXPECT_EQ(log[0].message, "Found duplicate keys --attention-backend, --attention-config.backend, --block-size");
  EXPECT_THAT(r.args, testing::Contains(R"({"backend":"Y"})"));  // the last value wins
}

TEST(Preprocess, DotOnlyInValueIsNotDotted) {
  auto r = pre({"--device-capability=8.9", "--model", "a.b/c.d"});
  EXPECT_THAT(r.args, ElementsAre("--device-capability=8.9", "--model", "a.b/c.d"));
}

TEST(Preprocess, MissingDottedValue) {
  try {
    pre({"--attention-config.backend"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
  }
}

}  // namespace
}  // namespace pagoda
