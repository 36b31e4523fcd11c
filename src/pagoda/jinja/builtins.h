// Filters, tests, methods and item access of pagoda's Jinja subset (internal to pagoda_jinja), with
// Jinja2's and Python's semantics. All throw RenderError for bad arguments or types.
//
// Filters: abs capitalize count d default dictsort e escape first float indent int items join last length
//   list lower map max min reject rejectattr replace reverse round safe select selectattr sort string sum
//   title tojson trim unique upper
// Tests: boolean callable defined divisibleby eq equalto escaped even false float ge gt in integer
//   iterable le lower lt mapping ne none number odd sameas sequence string true undefined upper, and the
//   operator names == != < <= > >=
// Methods: str.startswith endswith split rsplit strip lstrip rstrip replace upper lower title capitalize
//   find count join splitlines isdigit isalpha isspace; dict.items keys values get
#pragma once

#include <string_view>

#include "pagoda/jinja/value.h"

namespace pagoda::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Value apply_filter(std::string_view name, const Value& value, CallArgs& args);
bool apply_test(std::string_view name, const Value& value, CallArgs& args);
// obj.name(args) for str and dict objects; false when `obj` has no such method.
bool call_method(const Value& obj, std::string_view name, CallArgs& args, Value* result);

// Jinja2's getattr / getitem: a missing key, index or attribute gives Undefined (named after it); so does
// any lookup on Undefined or None.
Value get_attribute(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list or str (Python slice semantics); null parts are absent.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// `needle in container` (substring, element or key).
bool contains(const Value& container, const Value& needle);
// The items a for loop visits: a list's elements, a dict's keys, a string's characters; none for Undefined.
List iterate(const Value& v);

}  // namespace pagoda::jinja
