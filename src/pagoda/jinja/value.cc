#include "pagoda/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "pagoda/core/strings.h"
#include "pagoda/core/utf8.h"
#include "pagoda/jinja/strings.h"

namespace pagoda::jinja {

void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) throw RenderError(str_cat("string longer than ", kMaxStringBytes, " bytes"));
}

void check_list_size(size_t items) {
  if (items > kMaxListItems) throw RenderError(str_cat("list longer than ", kMaxListItems, " items"));
}

Nesting nesting_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.as_list().nesting;
    case Value::Kind::kDict:
      return v.as_dict().nesting;
    case Value::Kind::kNamespace:
      return Nesting{v.as_namespace().attrs.nesting.depth, true, 1};
    case Value::Kind::kString:
      return Nesting{0, false, 1 + v.as_string().size() / 16};
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kCallable:
      break;
  }
  return Nesting{0, false, 1};
}

namespace {

// Folds a child into its container's nesting; throws past kMaxValueDepth.
void add_child(const Value& child, Nesting* n) {
  const Nesting c = nesting_of(child);
  n->depth = std::max(n->depth, c.depth + 1);
  n->holds_namespace |= c.holds_namespace;
  if (__builtin_add_overflow(n->weight, c.weight, &n->weight)) n->weight = UINT64_MAX;
  if (n->depth > kMaxValueDepth) {
    throw RenderError(str_cat("lists, dicts and namespaces nested deeper than ", kMaxValueDepth, " levels"));
  }
}

Nesting dict_nesting(const Dict& d) {
  Nesting n;
  for (const auto& [k, v] : d.items) add_child(v, &n);
  return n;
}

}  // namespace

Value::Value(List items) {
  items.nesting = Nesting{};
  for (const Value& v : items) add_child(v, &items.nesting);
  v_ = std::make_shared<const List>(std::move(items));
}

Value::Value(Dict items) {
  items.nesting = dict_nesting(items);
  v_ = std::make_shared<const Dict>(std::move(items));
}

Value Value::make_namespace(Dict attrs) {
  attrs.nesting = dict_nesting(attrs);
  Value v;
  v.v_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
  return v;
}

void Namespace::set(std::string name, Value v) {
  Nesting n = attrs.nesting;
  add_child(v, &n);
  if (n.holds_namespace) {
    throw RenderError("a namespace attribute cannot hold a namespace (or a list or dict holding one)");
  }
  attrs.nesting.depth = n.depth;
  attrs.set(std::move(name), std::move(v));
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.v_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
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
  out.reserve(s.size() + 2);
  for (size_t pos = 0; pos < s.size();) {
    const auto byte = static_cast<unsigned char>(s[pos]);
    if (byte >= 0x20 && byte < 0x7F && byte != static_cast<unsigned char>(quote) && byte != '\\') {
      out.push_back(static_cast<char>(byte));  // printable ASCII, the common case, without decoding
      ++pos;
      continue;
    }
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
  std::string out;
  repr_into(&out);
  return out;
}

// Appends; the size check after each element bounds a list that holds one big value many times.
void Value::repr_into(std::string* out) const {
  auto dict_into = [out](const Dict& d) {
    *out += "{";
    bool first = true;
    for (const auto& [k, v] : d.items) {
      *out += (first ? "" : ", ") + repr_string(k) + ": ";
      first = false;
      v.repr_into(out);
      check_string_size(out->size());
    }
    *out += "}";
  };
  switch (kind()) {
    case Kind::kUndefined:
      *out += "Undefined";
      break;
    case Kind::kNone:
      *out += "None";
      break;
    case Kind::kBool:
      *out += as_bool() ? "True" : "False";
      break;
    case Kind::kInt:
      *out += std::to_string(as_int());
      break;
    case Kind::kFloat:
      *out += py_float_repr(as_float());
      break;
    case Kind::kString:
      *out += repr_string(as_string());
      break;
    case Kind::kList: {
      const List& items = as_list();
      *out += items.is_tuple ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += ", ";
        items[i].repr_into(out);
        check_string_size(out->size());
      }
      *out += items.is_tuple ? (items.size() == 1 ? ",)" : ")") : "]";
      break;
    }
    case Kind::kDict:
      dict_into(as_dict());
      break;
    case Kind::kNamespace:
      *out += "<Namespace ";
      dict_into(as_namespace().attrs);
      *out += ">";
      break;
    case Kind::kCallable:
      *out += "<function " + as_callable().name + ">";
      break;
  }
  check_string_size(out->size());
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
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + exp_buf;
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
