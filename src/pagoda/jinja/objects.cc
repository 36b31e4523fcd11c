// Item access, iteration, `in` and the str/dict methods of pagoda's Jinja subset (declared in
// builtins.h).
#include <algorithm>
#include <optional>

#include "pagoda/core/strings.h"
#include "pagoda/jinja/builtins.h"
#include "pagoda/jinja/strings.h"

namespace pagoda::jinja {
namespace {

using K = Value::Kind;

// Python's index normalization; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return static_cast<size_t>(i);
}

std::string char_string(char32_t c) { return from_code_points(std::u32string_view(&c, 1)); }

void expect_args(std::string_view method, const CallArgs& args, size_t max_positional) {
  if (!args.keyword.empty()) throw RenderError(str_cat(method, "() takes no keyword arguments"));
  if (args.positional.size() > max_positional) {
    throw RenderError(
        str_cat(method, "() takes at most ", max_positional, " arguments (", args.positional.size(), " given)"));
  }
}

const std::string& string_arg(std::string_view method, const Value& v) {
  if (!v.is_string()) throw RenderError(str_cat(method, "() argument must be str, not ", v.type_name()));
  return v.as_string();
}

std::optional<std::string> optional_string_arg(std::string_view method, const CallArgs& args, size_t i) {
  if (i >= args.positional.size() || args.positional[i].is_none()) return std::nullopt;
  return string_arg(method, args.positional[i]);
}

int64_t int_arg(std::string_view method, const CallArgs& args, size_t i, int64_t fallback) {
  if (i >= args.positional.size() || args.positional[i].is_none()) return fallback;
  const Value& v = args.positional[i];
  if (!v.is(K::kInt) && !v.is(K::kBool))
    throw RenderError(str_cat(method, "() argument must be int, not ", v.type_name()));
  return v.to_int();
}

Value string_list(std::vector<std::string> parts) {
  List out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value(std::move(out));
}

bool string_method(const std::string& s, std::string_view name, CallArgs& args, Value* result) {
  if (name == "startswith" || name == "endswith") {
    expect_args(name, args, 3);
    if (args.positional.empty()) throw RenderError(str_cat(name, "() takes at least 1 argument"));
    std::string_view subject = s;
    std::string sliced;
    if (args.positional.size() > 1) {  // s[start:end]
      const Value start = args.positional[1];
      const Value end = args.positional.size() > 2 ? args.positional[2] : Value(nullptr);
      sliced = get_slice(Value(s), &start, &end, nullptr).as_string();
      subject = sliced;
    }
    const Value& arg = args.positional[0];
    const List candidates = arg.is(K::kList) ? arg.as_list() : List{arg};
    bool hit = false;
    for (const Value& c : candidates) {
      const std::string& affix = string_arg(name, c);
      hit |= name == "startswith" ? starts_with(subject, affix) : ends_with(subject, affix);
    }
    *result = Value(hit);
  } else if (name == "split" || name == "rsplit") {
    std::optional<std::string> sep;
    int64_t maxsplit = -1;
    for (const auto& [key, v] : args.keyword) {
      if (key == "sep")
        sep = v.is_none() ? std::nullopt : std::optional<std::string>(string_arg(name, v));
      else if (key == "maxsplit")
        maxsplit = int_arg(name, CallArgs{{v}, {}}, 0, -1);
      else
        throw RenderError(str_cat(name, "() got an unexpected keyword argument '", key, "'"));
    }
    CallArgs positional{args.positional, {}};
    expect_args(name, positional, 2);
    if (!args.positional.empty()) sep = optional_string_arg(name, args, 0);
    if (args.positional.size() > 1) maxsplit = int_arg(name, args, 1, -1);
    *result = string_list(py_split(s, sep, maxsplit, name == "rsplit"));
  } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
    expect_args(name, args, 1);
    *result = Value(py_strip(s, optional_string_arg(name, args, 0), name != "rstrip", name != "lstrip"));
  } else if (name == "replace") {
    expect_args(name, args, 3);
    if (args.positional.size() < 2) throw RenderError("replace() takes at least 2 arguments");
    *result = Value(py_replace(s, string_arg(name, args.positional[0]), string_arg(name, args.positional[1]),
                               int_arg(name, args, 2, -1)));
  } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    expect_args(name, args, 0);
    *result = Value(name == "upper"   ? py_upper(s)
                    : name == "lower" ? py_lower(s)
                    : name == "title" ? py_title(s)
                                      : py_capitalize(s));
  } else if (name == "find" || name == "count") {
    expect_args(name, args, 1);
    if (args.positional.empty()) throw RenderError(str_cat(name, "() takes exactly 1 argument"));
    const std::string& sub = string_arg(name, args.positional[0]);
    if (name == "find") {
      const size_t at = s.find(sub);
      *result = Value(at == std::string::npos ? int64_t{-1} : py_len(std::string_view(s).substr(0, at)));
    } else {
      int64_t n = 0;
      if (sub.empty()) {
        n = py_len(s) + 1;
      } else {
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      }
      *result = Value(n);
    }
  } else if (name == "join") {
    expect_args(name, args, 1);
    if (args.positional.empty()) throw RenderError("join() takes exactly 1 argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(args.positional[0])) {
      if (!first) out += s;
      out += string_arg("join", item);
      check_string_size(out.size());
      first = false;
    }
    *result = Value(out);
  } else if (name == "splitlines") {
    expect_args(name, args, 0);
    *result = string_list(py_splitlines(s));
  } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
             name == "isupper") {
    expect_args(name, args, 0);
    const CharClass c = name == "isdigit"   ? CharClass::kDigit
                        : name == "isalpha" ? CharClass::kAlpha
                        : name == "isalnum" ? CharClass::kAlnum
                        : name == "isspace" ? CharClass::kSpace
                        : name == "islower" ? CharClass::kLower
                                            : CharClass::kUpper;
    *result = Value(py_is(s, c));
  } else {
    return false;
  }
  return true;
}

bool dict_method(const Dict& d, std::string_view name, CallArgs& args, Value* result) {
  if (name == "items" || name == "keys" || name == "values") {
    expect_args(name, args, 0);
    List out;
    for (const auto& [k, v] : d.items) {
      out.push_back(name == "items" ? pair(k, v) : name == "keys" ? Value(k) : v);
    }
    *result = Value(std::move(out));
  } else if (name == "get") {
    expect_args(name, args, 2);
    if (args.positional.empty()) throw RenderError("get() takes at least 1 argument");
    const Value& key = args.positional[0];
    const Value* v = key.is_string() ? d.find(key.as_string()) : nullptr;
    *result = v != nullptr ? *v : args.positional.size() > 1 ? args.positional[1] : Value(nullptr);
  } else {
    return false;
  }
  return true;
}

}  // namespace

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case K::kUndefined:
      return obj;  // lenient: x.a.b on undefined x stays undefined (named after x)
    case K::kList:
      if (key.is(K::kInt) || key.is(K::kBool)) {
        const List& items = obj.as_list();
        if (auto i = normalize_index(key.to_int(), items.size())) return items[*i];
      }
      break;
    case K::kString:
      if (key.is(K::kInt) || key.is(K::kBool)) {
        const std::u32string cps = to_code_points(obj.as_string());
        if (auto i = normalize_index(key.to_int(), cps.size())) return Value(char_string(cps[*i]));
      }
      break;
    case K::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      }
      break;
    case K::kNamespace:
      if (key.is_string()) {
        if (const Value* v = obj.as_namespace().attrs.find(key.as_string())) return *v;
      }
      break;
    case K::kNone:
    case K::kBool:
    case K::kInt:
    case K::kFloat:
    case K::kCallable:
      break;
  }
  return Value::undefined(key.is_string() ? key.as_string() : key.repr());
}

Value get_attribute(const Value& obj, std::string_view name) { return get_item(obj, Value(name)); }

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (v == nullptr || v->is_none()) return std::nullopt;
    if (v->is_undefined()) throw RenderError("slice index '" + v->undefined_name() + "' is undefined");
    if (!v->is(K::kInt) && !v->is(K::kBool))
      throw RenderError("slice indices must be integers or None, not " + v->type_name());
    return v->to_int();
  };
  const int64_t st = bound(step).value_or(1);
  if (st == 0) throw RenderError("slice step cannot be zero");
  std::u32string cps;
  const bool is_string = obj.is_string();
  if (is_string) {
    cps = to_code_points(obj.as_string());
  } else if (!obj.is(K::kList)) {
    if (obj.is_undefined()) return obj;
    throw RenderError("'" + obj.type_name() + "' object is not subscriptable");
  }
  const auto n = static_cast<int64_t>(is_string ? cps.size() : obj.as_list().size());
  // PySlice_AdjustIndices
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(bound(start), st > 0 ? 0 : n - 1);
  const int64_t e = adjust(bound(stop), st > 0 ? n : -1);
  std::u32string out_cps;
  List out_items;
  // b and e lie in [-1, n], so i stays in range; a step past INT64_MAX - i ends the slice.
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    if (is_string) {
      out_cps.push_back(cps[static_cast<size_t>(i)]);
    } else {
      out_items.push_back(obj.as_list()[static_cast<size_t>(i)]);
    }
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  return is_string ? Value(from_code_points(out_cps)) : Value(std::move(out_items));
}

bool contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case K::kUndefined:
      return false;
    case K::kString:
      if (!needle.is_string())
        throw RenderError("'in <string>' requires string as left operand, not " + needle.type_name());
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case K::kList: {
      const List& items = container.as_list();
      return std::any_of(items.begin(), items.end(), [&](const Value& v) { return equals(v, needle); });
    }
    case K::kDict:
      return needle.is_string() && container.as_dict().find(needle.as_string()) != nullptr;
    case K::kNone:
    case K::kBool:
    case K::kInt:
    case K::kFloat:
    case K::kNamespace:
    case K::kCallable:
      break;
  }
  throw RenderError("argument of type '" + container.type_name() + "' is not iterable");
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return {};
    case K::kList: {
      List items = v.as_list();
      items.is_tuple = false;  // what a loop or list() makes of it is a list
      return items;
    }
    case K::kDict: {
      List keys;
      for (const auto& [k, x] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case K::kString: {
      const std::u32string cps = to_code_points(v.as_string());
      check_list_size(cps.size());
      List chars;
      chars.reserve(cps.size());
      for (char32_t c : cps) chars.emplace_back(char_string(c));
      return chars;
    }
    case K::kNone:
    case K::kBool:
    case K::kInt:
    case K::kFloat:
    case K::kNamespace:
    case K::kCallable:
      break;
  }
  throw RenderError("'" + v.type_name() + "' object is not iterable");
}

bool call_method(const Value& obj, std::string_view name, CallArgs& args, Value* result) {
  if (obj.is_string()) return string_method(obj.as_string(), name, args, result);
  if (obj.is(K::kDict)) return dict_method(obj.as_dict(), name, args, result);
  return false;
}

}  // namespace pagoda::jinja
