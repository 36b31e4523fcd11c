// Python's operators on the values of pagoda's Jinja subset (internal to pagoda_jinja): arithmetic,
// repetition and concatenation, comparisons, and range().
//
// Integers are int64. Where Python's unbounded int would leave that range (+ - * ** of ints, unary minus
// and abs of INT64_MIN, INT64_MIN // -1) the result is the float Python's big number rounds to; division and
// modulo by zero, and zero to a negative power, are errors as in Python.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagoda/jinja/ast.h"

namespace pagoda::jinja {

// a op b for + - * / // % ** (not ~, and, or). `max_bytes` bounds the string or list that str + str,
// list + list and repetition (str * n, list * n) build: over it, RenderError before anything is allocated.
// Throws RenderError for unsupported operand types, undefined operands and division by zero.
Value binary_operator(BinaryOp op, const Value& a, const Value& b, size_t max_bytes);
// -v and +v of a number.
Value unary_operator(UnaryOp op, const Value& v);
// One comparison of a chain (a < b, a in b, ...).
bool compare(CompareOp op, const Value& a, const Value& b);

// range(stop) / range(start, stop[, step]) as a list, at most kMaxRange items.
inline constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox limit
Value make_range(const CallArgs& args);

// Bytes a list's copy takes: its Values and the strings they hold (lists and dicts inside are shared).
size_t list_bytes(const List& items);

}  // namespace pagoda::jinja
