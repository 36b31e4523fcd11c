// Values of pagoda's Jinja subset: the Python objects a chat template sees (None, bool, int, float, str,
// list, dict, namespace(), callables) plus Jinja's Undefined, with Python's semantics for truth, str(),
// repr(), ==, < and json.dumps.
//
// Lists and dicts are immutable and shared by copies, as in Hugging Face's ImmutableSandboxedEnvironment;
// a namespace() is the only mutable object. Dicts keep insertion order (Python's), which tojson shows.
// Strings are UTF-8; operations that count characters (length, indexing, slicing) count code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace pagoda::jinja {

// A failure while rendering; the renderer adds the template line. Parse errors are pagoda::Error.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bounds on every value, whatever the render's limits (RenderLimits in chat_template.h bounds the output,
// the steps and the input nesting; these bound what one operation can build before the renderer sees it):
// str(), repr(), json_dumps and the string builtins stop at kMaxStringBytes, the list builtins at
// kMaxListItems, and lists, dicts and namespaces nest at most kMaxValueDepth deep, so that printing,
// comparing, copying and freeing a value recurse a bounded number of levels.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;
inline constexpr int kMaxValueDepth = 256;

// Throw RenderError naming the bound when a string of `bytes` or a list of `items` would exceed it.
void check_string_size(size_t bytes);
void check_list_size(size_t items);

class Value;
struct List;
struct Dict;
struct Namespace;
struct Callable;
struct CallArgs;

struct Undefined {
  std::string name;  // what was looked up, for "'x' is undefined"; may be empty
};

class Value {
 public:
  // The order is the variant's: kind() is its index.
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() : v_(Undefined{}) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List items);
  Value(Dict items);
  static Value undefined(std::string name) { return Value(Undefined{std::move(name)}); }
  static Value make_namespace(Dict attrs);
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);
  // JSON -> Value: objects become dicts (in the json's key order), arrays lists. Throws RenderError "input
  // nested deeper than N levels" past `max_depth` (at most kMaxValueDepth) levels of arrays and objects.
  static Value from_json(const nlohmann::ordered_json& j, int max_depth = kMaxValueDepth);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is(Kind k) const { return kind() == k; }
  bool is_undefined() const { return is(Kind::kUndefined); }
  bool is_none() const { return is(Kind::kNone); }
  bool is_string() const { return is(Kind::kString); }
  bool is_int() const { return is(Kind::kInt); }
  // int, float or bool (bool is an int in Python).
  bool is_number() const { return is(Kind::kInt) || is(Kind::kFloat) || is(Kind::kBool); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }
  // PRECOND: is_number().
  double to_double() const;
  // PRECOND: is int or bool.
  int64_t to_int() const { return is(Kind::kBool) ? int64_t{as_bool()} : as_int(); }

  bool truthy() const;
  // Python str() and repr(); Undefined's str() is "". Throw RenderError past kMaxStringBytes.
  std::string str() const;
  std::string repr() const;
  // Python's type name, for messages: 'NoneType', 'int', 'str', ...
  std::string type_name() const;
  // Same object (Python `is`): equal scalars, or the same list/dict/namespace instance.
  bool same_as(const Value& other) const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  void repr_into(std::string* out) const;
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>
      v_;
};

// What a list, dict or namespace holds, set when it becomes a Value (which checks depth <= kMaxValueDepth).
struct Nesting {
  int depth = 1;                 // 1 + the deepest list, dict or namespace inside
  bool holds_namespace = false;  // a namespace anywhere inside (never stored into a namespace: no cycles)
  // The work of walking it (comparing, printing): the nodes of the tree it expands to, shared parts counted
  // each time they appear, plus a node per 16 bytes of string; saturates. Namespaces count as one node.
  uint64_t weight = 1;
};

// A Python list, or a tuple (which only prints differently: (1, 2), ('a',)). JSON gives lists; tuples come
// from `a, b` and (a, b) expressions and from items() pairs.
struct List : std::vector<Value> {
  using std::vector<Value>::vector;
  bool is_tuple = false;
  Nesting nesting;
};

// An insertion-ordered str -> Value map (Python dict). Lookups are linear: template dicts are small.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  Nesting nesting;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value v);  // replaces in place, or appends
};

// The one mutable object. Its nesting only grows; a list that held it before an assignment may count it as
// shallower than it now is, but an assigned value holds no namespace, so that error is at most one
// kMaxValueDepth and the true depth stays below 2 * kMaxValueDepth + 1.
struct Namespace {
  Dict attrs;
  // ns.name = v: throws RenderError when v is or holds a namespace (which could make a cycle).
  void set(std::string name, Value v);
};

// The nesting of a value: depth 0 and weight 1 for scalars (more for long strings).
Nesting nesting_of(const Value& v);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// The (key, value) tuple of dict.items().
Value pair(const std::string& key, const Value& value);

bool equals(const Value& a, const Value& b);
// Python's a < b; throws RenderError for types Python cannot order.
bool less_than(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...). Throws RenderError for values
// JSON cannot hold (Undefined, namespaces, callables).
// Throws RenderError when the text would pass kMaxStringBytes.
struct JsonDumpOptions {
  bool has_indent = false;
  std::string indent;          // per level, when has_indent
  std::string item_separator;  // "," with indent, ", " without (json.dumps' defaults)
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// Python float repr: shortest round-trip digits, "1.0", "1e+16", "1.5e-05", "inf", "nan".
std::string py_float_repr(double d);

// Code points of UTF-8 text (invalid bytes become U+FFFD) and back.
std::u32string to_code_points(std::string_view s);
std::string from_code_points(std::u32string_view s);
// Python str.isspace() for one character.
bool is_py_space(char32_t c);

}  // namespace pagoda::jinja
