#include "pagoda/jinja/operators.h"

#include <cmath>
#include <string>

#include "pagoda/core/strings.h"
#include "pagoda/jinja/builtins.h"

namespace pagoda::jinja {
namespace {

using K = Value::Kind;

std::string operator_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
    case BinaryOp::kConcat:
      return "~";
    case BinaryOp::kAnd:
      return "and";
    case BinaryOp::kOr:
      return "or";
  }
  return "?";
}

[[noreturn]] void undefined_error(const Value& v) {
  throw RenderError(v.undefined_name().empty() ? std::string("undefined value")
                                               : "'" + v.undefined_name() + "' is undefined");
}

bool is_integer(const Value& v) { return v.is(K::kInt) || v.is(K::kBool); }

[[noreturn]] void too_big(size_t max_bytes) {
  throw RenderError(str_cat("a string or list longer than the output limit (", max_bytes, " bytes)"));
}

// seq * n; n <= 0 gives an empty sequence, as in Python.
Value repeat(const Value& seq, int64_t n, size_t max_bytes) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : list_bytes(seq.as_list());
  if (n <= 0 || unit == 0) return seq.is_string() ? Value("") : Value(List{});
  if (static_cast<uint64_t>(n) > max_bytes / unit) too_big(max_bytes);
  const auto times = static_cast<size_t>(n);
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * times);
    for (size_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  const List& items = seq.as_list();
  check_list_size(items.size() * times);  // no overflow: items.size() <= unit
  List out;
  out.reserve(items.size() * times);
  for (size_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value(std::move(out));
}

// Python's p // q and p % q of ints (floored). PRECOND: q != 0.
Value floor_div_mod(BinaryOp op, int64_t p, int64_t q) {
  if (q == -1) {  // p / -1 overflows for INT64_MIN (and p % -1 traps on x86)
    if (op == BinaryOp::kMod) return Value(int64_t{0});
    return p == INT64_MIN ? Value(-static_cast<double>(p)) : Value(-p);
  }
  int64_t div = p / q, mod = p % q;
  if (mod != 0 && ((mod < 0) != (q < 0))) {  // Python floors toward negative infinity
    --div;
    mod += q;
  }
  return op == BinaryOp::kFloorDiv ? Value(div) : Value(mod);
}

// base ** exp of ints, exp >= 0, by squaring; a float when the result leaves int64.
Value int_power(int64_t base, int64_t exp) {
  int64_t acc = 1, b = base;
  bool overflow = false;
  for (int64_t e = exp; e > 0 && !overflow; e >>= 1) {
    if ((e & 1) != 0) overflow = __builtin_mul_overflow(acc, b, &acc);
    if (e > 1 && !overflow) overflow = __builtin_mul_overflow(b, b, &b);
  }
  if (!overflow) return Value(acc);
  return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
}

Value numeric(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = is_integer(a) && is_integer(b);
  const double x = a.to_double(), y = b.to_double();
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (ints && !__builtin_add_overflow(a.to_int(), b.to_int(), &r)) return Value(r);
      return Value(x + y);
    case BinaryOp::kSub:
      if (ints && !__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) return Value(r);
      return Value(x - y);
    case BinaryOp::kMul:
      if (ints && !__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) return Value(r);
      return Value(x * y);
    case BinaryOp::kDiv:
      if (y == 0) throw RenderError("division by zero");
      return Value(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0) throw RenderError(op == BinaryOp::kMod ? "modulo by zero" : "division by zero");
      if (ints) return floor_div_mod(op, a.to_int(), b.to_int());
      if (op == BinaryOp::kFloorDiv) return Value(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    case BinaryOp::kPow:
      if (x == 0 && y < 0) throw RenderError("zero cannot be raised to a negative power");
      if (ints && b.to_int() >= 0) return int_power(a.to_int(), b.to_int());
      return Value(std::pow(x, y));
    case BinaryOp::kConcat:
    case BinaryOp::kAnd:
    case BinaryOp::kOr:
      break;
  }
  throw RenderError("'" + operator_symbol(op) + "' is not an arithmetic operator");
}

}  // namespace

size_t list_bytes(const List& items) {
  size_t bytes = items.size() * sizeof(Value);
  for (const Value& v : items) {
    if (v.is_string()) bytes += v.as_string().size();
  }
  return bytes;
}

Value binary_operator(BinaryOp op, const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) return numeric(op, a, b);
  if (op == BinaryOp::kAdd && a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > max_bytes) too_big(max_bytes);
    return Value(a.as_string() + b.as_string());
  }
  if (op == BinaryOp::kAdd && a.is(K::kList) && b.is(K::kList)) {
    if (list_bytes(a.as_list()) + list_bytes(b.as_list()) > max_bytes) too_big(max_bytes);
    check_list_size(a.as_list().size() + b.as_list().size());
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == BinaryOp::kMul) {
    const bool a_seq = a.is_string() || a.is(K::kList), b_seq = b.is_string() || b.is(K::kList);
    if (a_seq && is_integer(b)) return repeat(a, b.to_int(), max_bytes);
    if (b_seq && is_integer(a)) return repeat(b, a.to_int(), max_bytes);
  }
  throw RenderError("unsupported operand type(s) for " + operator_symbol(op) + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

Value unary_operator(UnaryOp op, const Value& v) {
  if (op == UnaryOp::kNot) return Value(!v.truthy());
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_number()) {
    throw RenderError("bad operand type for unary " + std::string(op == UnaryOp::kNeg ? "-" : "+") + ": '" +
                      v.type_name() + "'");
  }
  if (v.is(K::kFloat)) return op == UnaryOp::kNeg ? Value(-v.as_float()) : v;
  const int64_t i = v.to_int();
  if (op == UnaryOp::kPos) return Value(i);
  return i == INT64_MIN ? Value(-static_cast<double>(i)) : Value(-i);
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return equals(a, b);
    case CompareOp::kNe:
      return !equals(a, b);
    case CompareOp::kLt:
      return less_than(a, b);
    case CompareOp::kLe:
      return !less_than(b, a);
    case CompareOp::kGt:
      return less_than(b, a);
    case CompareOp::kGe:
      return !less_than(a, b);
    case CompareOp::kIn:
      return contains(b, a);
    case CompareOp::kNotIn:
      return !contains(b, a);
  }
  return false;
}

Value make_range(const CallArgs& a) {
  if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) {
    throw RenderError("range() takes 1 to 3 positional arguments");
  }
  for (const Value& v : a.positional) {
    if (!is_integer(v)) throw RenderError("range() arguments must be int, not " + v.type_name());
  }
  const int64_t start = a.positional.size() > 1 ? a.positional[0].to_int() : 0;
  const int64_t stop = a.positional.size() > 1 ? a.positional[1].to_int() : a.positional[0].to_int();
  const int64_t step = a.positional.size() > 2 ? a.positional[2].to_int() : 1;
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  // The length in uint64 arithmetic: stop - start and |step| always fit.
  uint64_t n = 0;
  if (step > 0 && start < stop) {
    n = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    const uint64_t magnitude = static_cast<uint64_t>(0) - static_cast<uint64_t>(step);
    n = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / magnitude + 1;
  }
  if (n > static_cast<uint64_t>(kMaxRange)) {
    throw RenderError(str_cat("range() is too big (at most ", kMaxRange, " items)"));
  }
  List out;
  out.reserve(n);
  int64_t i = start;
  for (uint64_t k = 0; k < n; ++k) {
    out.emplace_back(i);
    if (k + 1 < n) i += step;  // the next item lies between start and stop: no overflow
  }
  return Value(std::move(out));
}

}  // namespace pagoda::jinja
