#include "pagoda/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_set>

#include "pagoda/core/strings.h"
#include "pagoda/jinja/strings.h"

namespace pagoda::jinja {
namespace {

using K = Value::Kind;

// Binds a call's positional and keyword arguments to named parameters, as Python does.
class Params {
 public:
  Params(std::string_view fn, CallArgs& args, std::initializer_list<std::string_view> names, size_t required = 0)
      : fn_(fn), names_(names), bound_(names.size(), nullptr) {
    if (args.positional.size() > names_.size()) {
      throw RenderError(
          str_cat(fn, "() takes at most ", names_.size(), " arguments (", args.positional.size(), " given)"));
    }
    for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
    for (auto& [key, v] : args.keyword) {
      const auto it = std::find(names_.begin(), names_.end(), key);
      if (it == names_.end()) throw RenderError(str_cat(fn, "() got an unexpected keyword argument '", key, "'"));
      const Value*& slot = bound_[static_cast<size_t>(it - names_.begin())];
      if (slot != nullptr) throw RenderError(str_cat(fn, "() got multiple values for argument '", key, "'"));
      slot = &v;
    }
    for (size_t i = 0; i < required; ++i) {
      if (bound_[i] == nullptr) throw RenderError(str_cat(fn, "() missing required argument '", names_[i], "'"));
    }
  }
  const Value* get(size_t i) const { return bound_[i]; }
  Value get_or(size_t i, Value fallback) const { return bound_[i] != nullptr ? *bound_[i] : std::move(fallback); }
  bool flag(size_t i, bool fallback = false) const { return bound_[i] != nullptr ? bound_[i]->truthy() : fallback; }
  std::string string(size_t i) const {
    const Value& v = *bound_[i];
    if (!v.is_string())
      throw RenderError(str_cat(fn_, "(): argument '", names_[i], "' must be a str, not ", v.type_name()));
    return v.as_string();
  }
  std::optional<std::string> optional_string(size_t i) const {
    if (bound_[i] == nullptr || bound_[i]->is_none()) return std::nullopt;
    return string(i);
  }
  int64_t integer(size_t i, int64_t fallback) const {
    if (bound_[i] == nullptr || bound_[i]->is_none()) return fallback;
    const Value& v = *bound_[i];
    if (!v.is(K::kInt) && !v.is(K::kBool)) {
      throw RenderError(str_cat(fn_, "(): argument '", names_[i], "' must be an int, not ", v.type_name()));
    }
    return v.to_int();
  }

 private:
  std::string_view fn_;
  std::vector<std::string_view> names_;
  std::vector<const Value*> bound_;
};

// n spaces for an indent width; a width past kMaxStringBytes is refused before allocating it.
std::string spaces(int64_t n) {
  const auto width = static_cast<size_t>(std::max<int64_t>(0, n));
  check_string_size(width);
  return std::string(width, ' ');
}

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) throw RenderError(str_cat(what, " needs a str, not ", v.type_name()));
  return v.as_string();
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return 0;
    case K::kString:
      return py_len(v.as_string());
    case K::kList:
      return static_cast<int64_t>(v.as_list().size());
    case K::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    default:
      throw RenderError(str_cat("object of type '", v.type_name(), "' has no len()"));
  }
}

// "a.b.0" attribute paths of map / selectattr / sort / join (integer parts index lists).
Value get_path(const Value& obj, const std::string& path) {
  Value v = obj;
  for (const std::string& part : split(path, '.')) {
    long long index = 0;
    v = parse_int64(part, &index) ? get_item(v, Value(static_cast<int64_t>(index))) : get_attribute(v, part);
  }
  return v;
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value(py_lower(v.as_string())) : v;
}

List sorted(List items, bool reverse, bool case_sensitive, const std::optional<std::string>& attribute) {
  auto key = [&](const Value& v) { return lower_if_string(attribute ? get_path(v, *attribute) : v, case_sensitive); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less_than(key(b), key(a)) : less_than(key(a), key(b));
  });
  return items;
}

// select / reject / selectattr / rejectattr: args are [attribute,] test name, test arguments.
Value filter_by_test(const Value& seq, CallArgs& args, bool by_attribute, bool keep, std::string_view fn) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw RenderError(str_cat(fn, "() needs an attribute name"));
    attribute = need_string(args.positional[next++], fn);
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) test = need_string(args.positional[next++], fn);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  if (test && !has_test(*test)) throw RenderError(str_cat(fn, "(): unknown test '", *test, "'"));
  List out;
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? get_path(item, attribute) : item;
    CallArgs a = test_args;
    const bool pass = test ? apply_test(*test, subject, a) : subject.truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_filter(const Value& seq, CallArgs& args) {
  List out;
  if (args.positional.empty()) {
    Params p("map", args, {"attribute", "default"}, 1);
    const std::string attribute = p.string(0);
    for (const Value& item : iterate(seq)) {
      Value v = get_path(item, attribute);
      if (v.is_undefined() && p.get(1) != nullptr) v = *p.get(1);
      out.push_back(std::move(v));
    }
    return Value(std::move(out));
  }
  const std::string filter = need_string(args.positional[0], "map");
  if (!has_filter(filter)) throw RenderError("map(): unknown filter '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(seq)) {
    CallArgs a = rest;
    out.push_back(apply_filter(filter, item, a));
  }
  return Value(std::move(out));
}

Value tojson_filter(const Value& v, CallArgs& args) {
  // Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = p.flag(0);
  o.sort_keys = p.flag(3);
  if (const Value* indent = p.get(1); indent != nullptr && !indent->is_none()) {
    o.has_indent = true;
    o.indent = indent->is_string() ? indent->as_string() : spaces(p.integer(1, 0));
  }
  o.item_separator = o.has_indent ? "," : ", ";
  if (const Value* sep = p.get(2); sep != nullptr && !sep->is_none()) {
    if (!sep->is(K::kList) || sep->as_list().size() != 2) throw RenderError("tojson(): separators must be a pair");
    o.item_separator = need_string(sep->as_list()[0], "tojson separators");
    o.key_separator = need_string(sep->as_list()[1], "tojson separators");
  }
  return Value(json_dumps(v, o));
}

Value indent_filter(const Value& v, CallArgs& args) {
  Params p("indent", args, {"width", "first", "blank"});
  const Value width = p.get_or(0, Value(4));
  const std::string pad = width.is_string() ? width.as_string() : spaces(p.integer(0, 4));
  const std::vector<std::string> lines = py_splitlines(v.str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent = i == 0 ? p.flag(1) : (p.flag(2) || !lines[i].empty());
    if (indent) out += pad;
    out += lines[i];
    check_string_size(out.size());
  }
  return Value(out);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's int(x) of a float: truncated; a float beyond int64 stays a (truncated) float, as an overflow
// does elsewhere; inf and nan, which int() refuses, give the fallback.
Value float_to_int(double d, const Value& fallback) {
  if (!std::isfinite(d)) return fallback;
  const double t = std::trunc(d);
  // 2^63 is exact in a double; every double in [-2^63, 2^63) converts without overflow.
  if (t >= -9223372036854775808.0 && t < 9223372036854775808.0) return Value(static_cast<int64_t>(t));
  return Value(t);
}

Value to_number(const Value& v, bool want_int, const Value& fallback) {
  if (v.is(K::kInt) || v.is(K::kBool)) return want_int ? Value(v.to_int()) : Value(v.to_double());
  if (v.is_number()) return want_int ? float_to_int(v.to_double(), fallback) : Value(v.to_double());
  if (!v.is_string()) return fallback;
  const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  long long i = 0;
  if (parse_int64(s, &i)) return want_int ? Value(static_cast<int64_t>(i)) : Value(static_cast<double>(i));
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return fallback;
  return want_int ? float_to_int(d, fallback) : Value(d);
}

// A string equal for keys Python's set treats as equal (1, 1.0 and True are one key); lists, dicts and the
// rest are unhashable, as in Python.
std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case K::kNone:
      return "N";
    case K::kUndefined:
      return "U";
    case K::kBool:
    case K::kInt:
      return "i" + std::to_string(v.to_int());
    case K::kFloat: {
      const double d = v.as_float();
      if (d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
        return "i" + std::to_string(static_cast<int64_t>(d));
      }
      return "f" + py_float_repr(d);
    }
    case K::kString:
      return "s" + v.as_string();
    case K::kList:
    case K::kDict:
    case K::kNamespace:
    case K::kCallable:
      break;
  }
  throw RenderError("unique(): unhashable type: '" + v.type_name() + "'");
}

Value sum_or_extreme(const Value& seq, CallArgs& args, std::string_view fn) {
  if (fn == "sum") {
    Params p("sum", args, {"attribute", "start"});
    Value total = p.get_or(1, Value(0));
    for (const Value& item : iterate(seq)) {
      const Value x = p.get(0) ? get_path(item, p.string(0)) : item;
      if (!x.is_number() || !total.is_number()) throw RenderError("sum() needs numbers, found " + x.type_name());
      int64_t r = 0;
      if (total.is(K::kFloat) || x.is(K::kFloat) || __builtin_add_overflow(total.to_int(), x.to_int(), &r)) {
        total = Value(total.to_double() + x.to_double());  // an int overflow becomes a float
      } else {
        total = Value(r);
      }
    }
    return total;
  }
  Params p(fn, args, {"case_sensitive", "attribute"});
  const std::optional<std::string> attribute = p.optional_string(1);
  const List items = sorted(iterate(seq), fn == "max", p.flag(0), attribute);
  return items.empty() ? Value::undefined("no " + std::string(fn) + " of an empty sequence") : items.front();
}

Value apply_filter_impl(std::string_view name, const Value& v, CallArgs& args) {
  if (name == "tojson") return tojson_filter(v, args);
  if (name == "safe") return v;
  if (name == "length" || name == "count") return Value(length(v));
  if (name == "string") return Value(v.str());
  if (name == "trim") {
    Params p("trim", args, {"chars"});
    return Value(py_strip(v.str(), p.optional_string(0), true, true));
  }
  if (name == "lower") return Value(py_lower(v.str()));
  if (name == "upper") return Value(py_upper(v.str()));
  if (name == "capitalize") return Value(py_capitalize(v.str()));
  if (name == "title") return Value(jinja_title(v.str()));
  if (name == "escape" || name == "e") return Value(html_escape(v.str()));
  if (name == "default" || name == "d") {
    Params p("default", args, {"default_value", "boolean"});
    const bool use_default = v.is_undefined() || (p.flag(1) && !v.truthy());
    return use_default ? p.get_or(0, Value("")) : v;
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value::undefined("no " + std::string(name) + " item, the sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    Params p("join", args, {"d", "attribute"});
    const std::string sep = p.get(0) ? p.string(0) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      out += (p.get(1) ? get_path(item, p.string(1)) : item).str();
      check_string_size(out.size());
      first = false;
    }
    return Value(out);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is(K::kDict)) throw RenderError("items filter needs a mapping, not " + v.type_name());
    List out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(pair(k, x));
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is(K::kDict)) throw RenderError("dictsort needs a mapping, not " + v.type_name());
    Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
    const std::string by = p.get(1) ? p.string(1) : "key";
    List pairs;
    for (const auto& [k, x] : v.as_dict().items) pairs.push_back(pair(k, x));
    return Value(sorted(std::move(pairs), p.flag(2), p.flag(0), by == "value" ? "1" : "0"));
  }
  if (name == "list") return Value(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string cps = to_code_points(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(from_code_points(cps));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "sort") {
    Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
    return Value(sorted(iterate(v), p.flag(0), p.flag(1), p.optional_string(2)));
  }
  if (name == "unique") {
    // Jinja2 keeps a set of the keys seen: linear, and only for hashable keys.
    Params p("unique", args, {"case_sensitive", "attribute"});
    List out;
    std::unordered_set<std::string> seen;
    for (const Value& item : iterate(v)) {
      const Value key = lower_if_string(p.get(1) ? get_path(item, p.string(1)) : item, p.flag(0));
      if (seen.insert(hash_key(key)).second) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "sum" || name == "min" || name == "max") return sum_or_extreme(v, args, name);
  if (name == "map") return map_filter(v, args);
  if (name == "select" || name == "reject") return filter_by_test(v, args, false, name == "select", name);
  if (name == "selectattr" || name == "rejectattr") return filter_by_test(v, args, true, name == "selectattr", name);
  if (name == "replace") {
    Params p("replace", args, {"old", "new", "count"}, 2);
    return Value(py_replace(v.str(), p.string(0), p.string(1), p.integer(2, -1)));
  }
  if (name == "indent") return indent_filter(v, args);
  if (name == "int" || name == "float") {
    Params p(name, args, {"default"});
    return to_number(v, name == "int", p.get_or(0, name == "int" ? Value(0) : Value(0.0)));
  }
  if (name == "abs") {
    if (v.is(K::kFloat)) return Value(std::fabs(v.as_float()));
    if (v.is(K::kInt) || v.is(K::kBool)) {
      const int64_t i = v.to_int();
      if (i == INT64_MIN) return Value(-static_cast<double>(i));  // overflow becomes a float
      return Value(i < 0 ? -i : i);
    }
    throw RenderError("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    Params p("round", args, {"precision", "method"});
    if (v.is(K::kInt) || v.is(K::kBool)) return Value(v.to_int());  // Python's round keeps ints
    const double scale = std::pow(10.0, static_cast<double>(p.integer(0, 0)));
    const std::string method = p.get(1) ? p.string(1) : "common";
    const double x = v.to_double() * scale;
    const double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);
    return Value(r / scale);
  }
  throw RenderError("unknown filter '" + std::string(name) + "'");
}

bool apply_test_impl(std::string_view name, const Value& v, CallArgs& args) {
  auto other = [&]() -> const Value& {
    Params p(name, args, {"other"}, 1);
    return *p.get(0);
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is(K::kDict);
  if (name == "sequence") return v.is_string() || v.is(K::kList) || v.is(K::kDict) || v.is_undefined();
  if (name == "iterable") return v.is_string() || v.is(K::kList) || v.is(K::kDict) || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is(K::kInt);
  if (name == "float") return v.is(K::kFloat);
  if (name == "boolean") return v.is(K::kBool);
  if (name == "true") return v.is(K::kBool) && v.as_bool();
  if (name == "false") return v.is(K::kBool) && !v.as_bool();
  if (name == "callable") return v.is(K::kCallable);
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && py_is(v.as_string(), CharClass::kLower);
  if (name == "upper") return v.is_string() && py_is(v.as_string(), CharClass::kUpper);
  if (name == "odd" || name == "even") {
    if (!v.is(K::kInt) && !v.is(K::kBool))
      throw RenderError(str_cat("'", name, "' test needs an int, not ", v.type_name()));
    return ((v.to_int() % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& n = other();
    if (!n.is_number() || !v.is_number() || n.to_double() == 0) throw RenderError("divisibleby needs non-zero numbers");
    return std::fmod(v.to_double(), n.to_double()) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(other(), v);
  if (name == "le" || name == "<=") return !less_than(other(), v);
  if (name == "ge" || name == ">=") return !less_than(v, other());
  if (name == "in") return contains(other(), v);
  if (name == "sameas") return v.same_as(other());
  throw RenderError("unknown test '" + std::string(name) + "'");
}

constexpr std::string_view kFilters[] = {
    "abs",    "capitalize", "count",      "d",       "default", "dictsort", "e",    "escape", "first",      "float",
    "indent", "int",        "items",      "join",    "last",    "length",   "list", "lower",  "map",        "max",
    "min",    "reject",     "rejectattr", "replace", "reverse", "round",    "safe", "select", "selectattr", "sort",
    "string", "sum",        "title",      "tojson",  "trim",    "unique",   "upper"};
constexpr std::string_view kTests[] = {"boolean", "callable", "defined",  "divisibleby", "eq",   "equalto",
                                       "escaped", "even",     "false",    "float",       "ge",   "greaterthan",
                                       "gt",      "in",       "integer",  "iterable",    "le",   "lessthan",
                                       "lower",   "lt",       "mapping",  "ne",          "none", "number",
                                       "odd",     "sameas",   "sequence", "string",      "true", "undefined",
                                       "upper",   "==",       "!=",       "<",           "<=",   ">",
                                       ">="};

}  // namespace

bool has_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
bool has_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value apply_filter(std::string_view name, const Value& value, CallArgs& args) {
  return apply_filter_impl(name, value, args);
}
bool apply_test(std::string_view name, const Value& value, CallArgs& args) {
  return apply_test_impl(name, value, args);
}

}  // namespace pagoda::jinja
