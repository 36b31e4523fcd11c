#include "pagoda/tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "pagoda/core/strings.h"
#include "pagoda/tokenizer/jinja_strings.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda::jinja {

using tokenizer_detail::utf8_append;
using tokenizer_detail::utf8_decode;

Value::Value(List items) : v_(std::make_shared<const List>(std::move(items))) {}
Value::Value(Dict items) : v_(std::make_shared<const Dict>(std::move(items))) {}

Value Value::make_namespace(Dict attrs) {
  Value v;
  v.v_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.v_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value(nullptr);
    case T::boolean:
      return Value(j.get<bool>());
    case T::number_integer:
      return Value(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case T::number_float:
      return Value(j.get<double>());
    case T::string:
      return Value(j.get<std::string>());
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value(std::move(items));
    }
    case T::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, from_json(e));
      return Value(std::move(d));
    }
    case T::binary:
    case T::discarded:
      break;
  }
  throw RenderError(str_cat("a JSON ", j.type_name(), " value cannot be passed to a template"));
}

double Value::to_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    case Kind::kFloat:
      return as_float();
    default:
      throw RenderError(str_cat("expected a number, found ", type_name()));
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    const size_t len = utf8_decode(s, pos, &c);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_is_printable(c)) {
      char buf[16];
      const char* format = c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof(buf), format, static_cast<unsigned>(c));
      out += buf;
    } else {
      out.append(s, pos, len);
    }
    pos += len;
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return py_float_repr(as_float());
    case Kind::kString:
      return repr_string(as_string());
    case Kind::kList: {
      const List& items = as_list();
      std::string out = items.is_tuple ? "(" : "[";
      for (const Value& v : items) out += (out.size() > 1 ? ", " : "") + v.repr();
      if (items.is_tuple) return out + (items.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (const auto& [k, v] : as_dict().items) out += (out.size() > 1 ? ", " : "") + repr_string(k) + ": " + v.repr();
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace " + Value(as_namespace().attrs).repr() + ">";
    case Kind::kCallable:
      return "<function " + as_callable().name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "";
}

bool Value::same_as(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
      return &as_list() == &other.as_list();
    case Kind::kDict:
      return &as_dict() == &other.as_dict();
    case Kind::kNamespace:
      return &as_namespace() == &other.as_namespace();
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
    default:
      return equals(*this, other);
  }
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value pair(const std::string& key, const Value& value) {
  List items{Value(key), value};
  items.is_tuple = true;
  return Value(std::move(items));
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is(K::kFloat) || b.is(K::kFloat)) return a.to_double() == b.to_double();
    return a.to_int() == b.to_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size() || x.is_tuple != y.is_tuple) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals(v, *w)) return false;
      }
      return true;
    }
    case K::kBool:
    case K::kInt:
    case K::kFloat:  // handled above
    case K::kNamespace:
    case K::kCallable:
      return a.same_as(b);
  }
  return false;
}

bool less_than(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is(K::kFloat) || b.is(K::kFloat)) return a.to_double() < b.to_double();
    return a.to_int() < b.to_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order == code point order
  if (a.is(K::kList) && b.is(K::kList)) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw RenderError(str_cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'"));
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);  // shortest digits
  const std::string s(buf, res.ptr);
  const bool negative = s[0] == '-';
  const size_t e = s.find('e');
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  const int exp = std::stoi(s.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python's repr switches to exponent notation outside this range
    if (exp >= 0) {
      const size_t int_digits = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_digits) {
        out += digits + std::string(int_digits - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_digits) + "." + digits.substr(int_digits);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + exp_buf;
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    const auto b = static_cast<unsigned char>(s[pos]);
    if (b >= 0x80 && ensure_ascii) {
      char32_t c;
      pos += utf8_decode(s, pos, &c);
      auto hex = [&](unsigned u) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", u);
        *out += buf;
      };
      if (c >= 0x10000) {
        hex(0xD800 + ((c - 0x10000) >> 10));
        hex(0xDC00 + ((c - 0x10000) & 0x3FF));
      } else {
        hex(c);
      }
      continue;
    }
    ++pos;
    switch (b) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (b < 0x20 || (b == 0x7F && ensure_ascii)) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", b);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(b));
        }
    }
  }
  out->push_back('"');
}

void json_dump(const Value& v, const JsonDumpOptions& o, int level, std::string* out) {
  using K = Value::Kind;
  auto newline = [&](int lvl) {
    out->push_back('\n');
    for (int i = 0; i < lvl; ++i) *out += o.indent;
  };
  switch (v.kind()) {
    case K::kNone:
      *out += "null";
      return;
    case K::kBool:
      *out += v.as_bool() ? "true" : "false";
      return;
    case K::kInt:
      *out += std::to_string(v.as_int());
      return;
    case K::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += py_float_repr(d);
      }
      return;
    }
    case K::kString:
      json_string(v.as_string(), o.ensure_ascii, out);
      return;
    case K::kList: {
      const List& items = v.as_list();
      if (items.empty()) {
        *out += "[]";
        return;
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += o.item_separator;
        if (o.has_indent) newline(level + 1);
        json_dump(items[i], o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out->push_back(']');
      return;
    }
    case K::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        *out += "{}";
        return;
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += o.item_separator;
        if (o.has_indent) newline(level + 1);
        json_string(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        json_dump(items[i]->second, o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out->push_back('}');
      return;
    }
    case K::kUndefined:
    case K::kNamespace:
    case K::kCallable:
      break;
  }
  throw RenderError(str_cat("Object of type ", v.type_name(), " is not JSON serializable"));
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  json_dump(v, options, 0, &out);
  return out;
}

std::u32string to_code_points(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    pos += utf8_decode(s, pos, &c);
    out.push_back(c);
  }
  return out;
}

std::string from_code_points(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(c, &out);
  return out;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace pagoda::jinja
