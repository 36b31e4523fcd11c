// Hostile chat templates and inputs: every one must end in a pagoda::Error (or a correct rendering), never a
// trap, a stack overflow, an endless loop or gigabytes of memory. One test per class of defect, with the
// variants that used to crash or hang: integer arithmetic at the int64 edges, repetition and the output
// budget, the step budget, cancellation and the deadline, deep JSON input, deep template source, deep
// values built by the template, recursive macros, and the builtins' own argument checks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/chat_template.h"
#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::ordered_json;
using testing_data::data_dir;
using testing_data::read_file;

const ordered_json& one_message() {
  static const ordered_json m = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  return m;
}

std::string render(const std::string& tmpl, const RenderLimits& limits = {}) {
  return ChatTemplate(tmpl).render(one_message(), nullptr, false, nullptr, "", "", limits);
}

// The message of the pagoda::Error that rendering throws ("" when it renders). Any other exception fails.
std::string error_of(const std::string& tmpl, const RenderLimits& limits = {}) {
  try {
    render(tmpl, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr const char* kMin = "(-9223372036854775807 - 1)";  // INT64_MIN; the literal alone is too large

TEST(JinjaLimits, IntegerEdgesNeverTrap) {
  const std::string min = kMin;
  // Python's answer is 2**63, a big int: it becomes a float, as every int64 overflow does.
  EXPECT_EQ(render("{{ " + min + " // -1 }}"), "9.223372036854776e+18");
  EXPECT_EQ(render("{{ " + min + " % -1 }}"), "0");
  EXPECT_EQ(render("{{ " + min + " // 1 }}|{{ " + min + " % 7 }}|{{ -7 // 2 }}|{{ -7 % 2 }}"),
            "-9223372036854775808|6|-4|1");
  EXPECT_EQ(render("{{ -" + min + " }}|{{ " + min + "|abs }}"), "9.223372036854776e+18|9.223372036854776e+18");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}|{{ " + min + " - 1 }}|{{ 4611686018427387904 * 2 }}"),
            "9.223372036854776e+18|-9.223372036854776e+18|9.223372036854776e+18");
  EXPECT_EQ(render("{{ 2 ** 62 }}|{{ 2 ** 63 }}|{{ (-2) ** 63 }}|{{ 10 ** 100 }}"),
            "4611686018427387904|9.223372036854776e+18|-9223372036854775808|1e+100");
  // Exponentiation by squaring: a huge exponent of 1, 0 or -1 is quick.
  EXPECT_EQ(render("{{ 1 ** 9223372036854775807 }}|{{ (-1) ** 9223372036854775807 }}|{{ 0 ** 10**18 }}"), "1|-1|0");
  EXPECT_EQ(render("{{ [9223372036854775807, 1]|sum }}"), "9.223372036854776e+18");
  EXPECT_EQ(render("{{ 1e300|int }}|{{ 'inf'|float|int }}|{{ 'nan'|float|int(5) }}|{{ -2.5|int }}"),
            "1e+300|0|5|-2");
}

TEST(JinjaLimits, DivisionByZeroIsATemplateError) {
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "chat template line 1: division by zero");
  EXPECT_EQ(error_of("{{ 1 % 0 }}"), "chat template line 1: modulo by zero");
  EXPECT_EQ(error_of("{{ 1 / 0 }}"), "chat template line 1: division by zero");
  EXPECT_EQ(error_of("\n{{ " + std::string(kMin) + " // 0 }}"), "chat template line 2: division by zero");
  EXPECT_EQ(error_of("{{ 1.5 // 0.0 }}"), "chat template line 1: division by zero");
  EXPECT_EQ(error_of("{{ 1.5 % false }}"), "chat template line 1: modulo by zero");
  EXPECT_EQ(error_of("{{ 0 ** -1 }}"), "chat template line 1: zero cannot be raised to a negative power");
  EXPECT_TRUE(has(error_of("{{ 7 is divisibleby 0 }}"), "divisibleby needs non-zero numbers"));
}

TEST(JinjaLimits, RangesAndSlicesAtTheInt64Edges) {
  const std::string min = kMin;
  EXPECT_EQ(render("{{ range(" + min + ", 9223372036854775807, 4611686018427387904)|list }}"),
            "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
  EXPECT_EQ(render("{{ range(9223372036854775807, " + min + ", " + min + ")|list }}"), "[9223372036854775807, -1]");
  EXPECT_EQ(render("{{ range(0, 10, " + min + ")|list }}|{{ range(5, 2)|list }}"), "[]|[]");
  EXPECT_EQ(error_of("{{ range(9223372036854775807)|length }}"),
            "chat template line 1: range() is too big (at most 100000 items)");
  EXPECT_EQ(error_of("{{ range(0, 1, 0) }}"), "chat template line 1: range() arg 3 must not be zero");
  EXPECT_EQ(render("{{ 'abc'[::" + min + "] }}|{{ 'abc'[1::9223372036854775807] }}|{{ [1, 2, 3][::9223372036854775807] }}"),
            "c|b|[1]");
  EXPECT_EQ(render("{{ [1, 2, 3][" + min + ":9223372036854775807] }}|{{ 'abc'[9223372036854775807:" + min + ":-1] }}"),
            "[1, 2, 3]|cba");
  EXPECT_EQ(render("{{ [1, 2, 3][" + min + "] }}|{{ 'abc'[9223372036854775807] }}|"), "||");
}

TEST(JinjaLimits, RepetitionAndConcatenationStayWithinTheOutputLimit) {
  const char* kTooLong = "longer than the output limit (16777216 bytes";
  EXPECT_TRUE(has(error_of("{{ 'x' * 10**10 }}"), kTooLong));
  EXPECT_TRUE(has(error_of("{{ 10**18 * 'xy' }}"), kTooLong));
  EXPECT_TRUE(has(error_of("{{ [1] * 10**10 }}"), kTooLong));
  EXPECT_TRUE(has(error_of("{{ ['x' * 1000000] * 100 }}"), kTooLong));  // the strings are copied
  EXPECT_TRUE(has(error_of("{{ ('x' * 10000000) ~ ('x' * 10000000) }}"), kTooLong));
  EXPECT_TRUE(has(error_of("{{ ('x' * 10000000) + ('x' * 10000000) }}"), kTooLong));
  EXPECT_TRUE(has(error_of("{% set l = ['x' * 10000000] %}{{ l + l }}"), kTooLong));
  EXPECT_EQ(render("{{ 'x' * -5 }}|{{ [1] * " + std::string(kMin) + " }}|{{ '' * 10**18 }}|{{ [] * 10**18 }}"),
            "|[]||[]");
  // A list may hold one big string many times (shared), but printing it stops at 64 MiB.
  EXPECT_TRUE(has(error_of("{% set s = 'x' * 10000000 %}{% set l = [[s]] * 100 %}{{ l|length }}{{ l }}"),
                  "string longer than 67108864 bytes"));
  EXPECT_TRUE(has(error_of("{% set s = 'x' * 10000000 %}{{ ([[s]] * 100)|tojson }}"),
                  "string longer than 67108864 bytes"));
  EXPECT_TRUE(has(error_of("{{ ('ab' * 1000000).replace('', 'x' * 1000) }}"), "string longer than"));
  EXPECT_TRUE(has(error_of("{{ (['a'] * 100000)|join('x' * 10000) }}"), "string longer than"));
  EXPECT_TRUE(has(error_of("{{ 'a'|indent(10**18) }}"), "string longer than"));
  EXPECT_TRUE(has(error_of("{{ [[1]]|tojson(indent=10**18) }}"), "string longer than"));
  EXPECT_TRUE(has(error_of("{{ ('x,' * 8000000).split(',')|length }}"), "list longer than 1048576 items"));
}

TEST(JinjaLimits, StepBudgetStopsLongLoops) {
  // range() alone refuses 10**10 items; nested loops reach 10**10 iterations in steps.
  EXPECT_TRUE(has(error_of("{% for i in range(10**10) %}{% endfor %}"), "range() is too big"));
  const std::string nested = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  EXPECT_EQ(error_of(nested), "chat template line 1: rendering exceeded 10000000 steps (RenderLimits::max_steps)");
  RenderLimits small;
  small.max_steps = 1000;
  EXPECT_TRUE(has(error_of("{% for i in range(2000) %}{% endfor %}", small), "rendering exceeded 1000 steps"));
  // Appending in a loop: the copies are work, counted by their size.
  EXPECT_TRUE(has(error_of("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% for j in range(100) %}"
                           "{% set ns.s = ns.s ~ 'xxxxxxxx' %}{% endfor %}{% endfor %}"),
                  "steps (RenderLimits::max_steps)"));
  small.max_steps = 100000;
  EXPECT_TRUE(has(error_of("{% macro m(n) %}{% for i in range(100000) %}{% endfor %}{% endmacro %}"
                           "{% for i in range(100000) %}{{ m(i) }}{% endfor %}",
                           small),
                  "rendering exceeded 100000 steps"));
  EXPECT_TRUE(has(error_of("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{% set t = s %}{% endfor %}", small),
                  "rendering exceeded 100000 steps"));
  EXPECT_TRUE(has(error_of("{% for i in range(100000) %}{{ i }}{% endfor %}", small), "rendering exceeded 100000 steps"));
  // Lists that share their parts are cheap to build and exponential to walk: comparing two such (equal,
  // distinct) lists 40 levels deep would visit 10**40 nodes.
  const std::string shared = "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}"
                             "{% set ns.a = [ns.a] * 10 %}{% set ns.b = [ns.b] * 10 %}{% endfor %}";
  for (const char* walk : {"{{ ns.a == ns.b }}", "{{ ns.a in [ns.b] }}", "{{ [ns.a, ns.b]|sort|length }}",
                           "{{ ns.a|tojson|length }}", "{{ ns.a }}", "{{ ns.a ~ '' }}"}) {
    EXPECT_TRUE(has(error_of(shared + walk), "steps (RenderLimits::max_steps)")) << walk;
  }
}

TEST(JinjaLimits, OutputBudget) {
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% for j in range(100) %}{{ 'x' * 10000 }}{% endfor %}{% endfor %}"),
            "chat template line 1: output longer than 16777216 bytes (RenderLimits::max_output_bytes)");
  RenderLimits small;
  small.max_output_bytes = 100;
  EXPECT_EQ(render(std::string(100, 'a'), small), std::string(100, 'a'));
  EXPECT_TRUE(has(error_of(std::string(101, 'a'), small), "output longer than 100 bytes"));
  EXPECT_TRUE(has(error_of("{% for i in range(1000) %}{{ i }}{% endfor %}", small), "output longer than 100 bytes"));
  // Captured output (set blocks, macro calls) is output too.
  EXPECT_TRUE(has(error_of("{% set s %}{% for i in range(1000) %}x{% endfor %}{% endset %}", small),
                  "output longer than 100 bytes"));
  EXPECT_TRUE(has(error_of("{{ 'x' * 200 }}", small), "longer than the output limit (100 bytes"));
  EXPECT_TRUE(has(error_of("{{ 'x' ~ 'y' * 100 }}", small), "longer than the output limit (100 bytes"));
}

TEST(JinjaLimits, CancelFromAnotherThread) {
  const std::string endless =
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}";
  std::atomic<bool> cancel{false};
  RenderLimits limits;
  limits.max_steps = INT64_MAX;
  limits.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  EXPECT_EQ(error_of(endless, limits), "chat template: rendering cancelled");
  canceller.join();
  // Already cancelled: stops before rendering anything.
  EXPECT_EQ(error_of("hello", limits), "chat template: rendering cancelled");
  cancel = false;
  EXPECT_EQ(render("hello", limits), "hello");
}

TEST(JinjaLimits, Deadline) {
  const std::string endless =
      "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}";
  RenderLimits limits;
  limits.max_steps = INT64_MAX;
  limits.timeout = std::chrono::milliseconds(50);
  EXPECT_EQ(error_of(endless, limits), "chat template: rendering exceeded its time limit of 50 ms");
  EXPECT_EQ(render("{{ 1 + 1 }}", limits), "2");
}

// [[[...["x"]...]]] `depth` arrays deep, built without recursion (nlohmann frees it without recursion too).
ordered_json nested_arrays(int depth) {
  ordered_json j = "x";
  for (int i = 0; i < depth; ++i) {
    ordered_json outer = ordered_json::array();
    outer.push_back(std::move(j));
    j = std::move(outer);
  }
  return j;
}

TEST(JinjaLimits, DeepJsonInputIsRefused) {
  const ChatTemplate t("{{ messages[0].content|length }}|{{ tools|length if tools else 0 }}|{{ extra|length }}");
  auto message_with = [](ordered_json content) {
    ordered_json m = ordered_json::object();
    m["role"] = "user";
    m["content"] = std::move(content);
    ordered_json messages = ordered_json::array();
    messages.push_back(std::move(m));
    return messages;
  };
  const char* kTooDeep = "chat template: input nested deeper than 128 levels";
  try {
    t.render(message_with(nested_arrays(20000)), nullptr, false, nullptr, "", "");
    ADD_FAILURE() << "20,000 levels rendered";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), kTooDeep);
  }
  try {
    ordered_json tools = ordered_json::array();
    tools.push_back(nested_arrays(20000));
    t.render(one_message(), tools, false, nullptr, "", "");
    ADD_FAILURE() << "deep tools rendered";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), kTooDeep);
  }
  try {
    ordered_json kwargs = ordered_json::object();
    kwargs["extra"] = nested_arrays(20000);
    t.render(one_message(), nullptr, false, kwargs, "", "");
    ADD_FAILURE() << "deep kwargs rendered";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), kTooDeep);
  }
  // Depth 126 in content is 128 with the messages list and the message: still fine.
  EXPECT_EQ(t.render(message_with(nested_arrays(126)), nullptr, false, nullptr, "", ""), "1|0|0");
  RenderLimits shallow;
  shallow.max_input_depth = 4;
  EXPECT_THROW(t.render(message_with(nested_arrays(3)), nullptr, false, nullptr, "", "", shallow), Error);
  EXPECT_EQ(t.render(message_with(nested_arrays(2)), nullptr, false, nullptr, "", "", shallow), "1|0|0");
}

TEST(JinjaLimits, DeepTemplateSourceIsRefused) {
  auto parse_error = [](const std::string& source) {
    try {
      ChatTemplate t(source);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto repeated = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  EXPECT_TRUE(has(parse_error("{{ " + repeated("(", 100000) + "1" + repeated(")", 100000) + " }}"), "nesting too deep"));
  EXPECT_TRUE(has(parse_error("{{ " + repeated("[", 100000) + repeated("]", 100000) + " }}"), "nesting too deep"));
  EXPECT_TRUE(
      has(parse_error("{{ " + repeated("{'a': ", 100000) + "1" + repeated("}", 100000) + " }}"), "nesting too deep"));
  EXPECT_TRUE(has(parse_error("{{ " + repeated("-", 100000) + "1 }}"), "nesting too deep"));
  EXPECT_TRUE(has(parse_error(repeated("{% if x %}", 100000)), "nesting too deep"));
  EXPECT_TRUE(has(parse_error(repeated("{% for x in y %}", 100000)), "nesting too deep"));
  // Chains nest without brackets.
  const char* kTall = "expression nested deeper than 256 levels";
  EXPECT_TRUE(has(parse_error("{{ 1" + repeated(" + 1", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated(".a", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated("[0]", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated("|e", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated("()", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated(" ~ x", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated(" and x", 100000) + " }}"), kTall));
  EXPECT_TRUE(has(parse_error("{{ x" + repeated(" if x", 100000) + " }}"), kTall));
  // A long flat list is not deep.
  EXPECT_EQ(render("{{ [" + repeated("1, ", 100000) + "1]|length }}"), "100001");
}

TEST(JinjaLimits, RecursiveMacrosAndDeepValuesAreRefused) {
  EXPECT_TRUE(has(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"), "macro recursion too deep"));
  EXPECT_TRUE(has(error_of("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
                  "macro recursion too deep"));
  // Each level holds a tall expression: the evaluation depth, not the macro count, stops it.
  std::string tall = "x";
  for (int i = 0; i < 200; ++i) tall += " ~ x";
  EXPECT_TRUE(has(error_of("{% macro m(x) %}{{ m(x) ~ " + tall + " }}{% endmacro %}{{ m('a') }}"),
                  "statements, expressions and macro calls nested too deep (more than 500 levels)"));
  // Values the template builds.
  EXPECT_TRUE(has(error_of("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                           "{% endfor %}{{ ns.x }}"),
                  "nested deeper than 256 levels"));
  EXPECT_TRUE(has(error_of("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}"
                           "{% endfor %}{{ ns.x|tojson }}"),
                  "nested deeper than 256 levels"));
  // A namespace holding itself would be a cycle (endless printing, leaked memory).
  EXPECT_TRUE(has(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "cannot hold a namespace"));
  EXPECT_TRUE(has(error_of("{% set ns = namespace() %}{% set ns.l = [1, {'a': ns}] %}{{ ns }}"),
                  "cannot hold a namespace"));
  EXPECT_EQ(render("{% set a = namespace(v=1) %}{% set b = namespace(inner=a) %}{% set a.v = 2 %}{{ b.inner.v }}"),
            "2");
}

TEST(JinjaLimits, BuiltinsCheckTheirArguments) {
  EXPECT_TRUE(has(error_of("{{ 'a b'.split(maxsplit='x') }}"), "must be int"));
  EXPECT_EQ(render("{{ 'a b c'.split(maxsplit=1) }}"), "['a', 'b c']");
  EXPECT_EQ(render("{{ 'a'|indent(-5) }}|{{ [1]|tojson(indent=-3) }}"), "a|[\n1\n]");
  EXPECT_EQ(render("{{ ('ab' * 10)|list|length }}"), "20");
  // unique is linear (it was quadratic: 300,000 items meant 4.5e10 comparisons), over hashable keys as in Jinja2.
  EXPECT_EQ(render("{{ (range(100000)|list * 3)|unique|list|length }}"), "100000");
  EXPECT_EQ(render("{{ [1, 1.0, true, 'A', 'a', none, 2.5]|unique|list }}"), "[1, 'A', None, 2.5]");
  EXPECT_EQ(render("{{ ['A', 'a']|unique(case_sensitive=true)|list }}"), "['A', 'a']");
  EXPECT_TRUE(has(error_of("{{ [[1], [1]]|unique|list }}"), "unhashable type: 'list'"));
}

// The defaults leave room for real templates: every golden conversation renders within a hundredth of the
// default step budget and output size.
TEST(JinjaLimits, RealTemplatesRenderWellWithinTheDefaults) {
  const ordered_json file = ordered_json::parse(read_file(data_dir() / "tokenizers/chat-template-cases.json"));
  RenderLimits tight;
  tight.max_steps = RenderLimits{}.max_steps / 100;
  tight.max_output_bytes = RenderLimits{}.max_output_bytes / 100;
  for (const ordered_json& c : file["cases"]) {
    const std::string name = c["template"].get<std::string>();
    const std::string dir = name == "qwen3" ? "qwen2" : name == "qwen2.5" ? "qwen2.5" : "llama3";
    const bool llama = name == "llama3.1";
    const std::string rendered = render_chat_template(
        read_file(data_dir() / "tokenizers" / dir / "chat_template.jinja"), c["messages"], c["tools"],
        c["add_generation_prompt"].get<bool>(), c["kwargs"], llama ? "<|begin_of_text|>" : "",
        llama ? "<|eot_id|>" : "<|im_end|>", tight);
    EXPECT_EQ(rendered, c["rendered"].get<std::string>()) << c["id"];
  }
}

}  // namespace
}  // namespace pagoda
