// JSON in and out of pagoda's Jinja values (declared in value.h): Value::from_json for the template's
// inputs, json_dumps for tojson (Python's json.dumps).
#include <cmath>
#include <nlohmann/json.hpp>

#include "pagoda/core/strings.h"
#include "pagoda/core/utf8.h"
#include "pagoda/jinja/value.h"

namespace pagoda::jinja {

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth, int max_depth) {
  using T = nlohmann::ordered_json::value_t;
  if ((j.is_array() || j.is_object()) && depth >= max_depth) {
    throw RenderError(str_cat("input nested deeper than ", max_depth, " levels"));
  }
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
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1, max_depth));
      return Value(std::move(items));
    }
    case T::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, from_json_at(e, depth + 1, max_depth));
      return Value(std::move(d));
    }
    case T::binary:
    case T::discarded:
      break;
  }
  throw RenderError(str_cat("a JSON ", j.type_name(), " value cannot be passed to a template"));
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j, int max_depth) {
  return from_json_at(j, 0, std::min(max_depth, kMaxValueDepth));
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
    for (int i = 0; i < lvl; ++i) {
      *out += o.indent;
      check_string_size(out->size());
    }
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
        check_string_size(out->size());
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
        check_string_size(out->size());
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

}  // namespace pagoda::jinja
