#include "pagoda/tokenizer/jinja_eval.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/jinja_builtins.h"

namespace pagoda::jinja {
namespace {

using K = Value::Kind;

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox limit on range()
constexpr int kMaxMacroDepth = 200;    // recursion guard: a macro calling itself forever

[[noreturn]] void undefined_error(const Value& v) {
  throw RenderError(v.undefined_name().empty() ? std::string("undefined value")
                                               : "'" + v.undefined_name() + "' is undefined");
}

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

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out));
}

// Python arithmetic on two evaluated operands.
Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = (a.is(K::kInt) || a.is(K::kBool)) && (b.is(K::kInt) || b.is(K::kBool));
  if (a.is_number() && b.is_number()) {
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
      case BinaryOp::kMod:
        if (y == 0) throw RenderError(op == BinaryOp::kMod ? "modulo by zero" : "division by zero");
        if (ints) {
          const int64_t p = a.to_int(), q = b.to_int();
          int64_t div = p / q, mod = p % q;
          if (mod != 0 && ((mod < 0) != (q < 0))) {  // Python floors toward negative infinity
            --div;
            mod += q;
          }
          return op == BinaryOp::kFloorDiv ? Value(div) : Value(mod);
        }
        if (op == BinaryOp::kFloorDiv) return Value(std::floor(x / y));
        {
          double m = std::fmod(x, y);
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value(m);
        }
      case BinaryOp::kPow:
        if (ints && b.to_int() >= 0) {
          int64_t acc = 1;
          bool overflow = false;
          for (int64_t i = 0; i < b.to_int() && !overflow; ++i)
            overflow = __builtin_mul_overflow(acc, a.to_int(), &acc);
          if (!overflow) return Value(acc);
        }
        return Value(std::pow(x, y));
      case BinaryOp::kConcat:
      case BinaryOp::kAnd:
      case BinaryOp::kOr:
        break;
    }
  }
  if (op == BinaryOp::kAdd && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (op == BinaryOp::kAdd && a.is(K::kList) && b.is(K::kList)) {
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == BinaryOp::kMul) {
    const bool a_seq = a.is_string() || a.is(K::kList), b_seq = b.is_string() || b.is(K::kList);
    if (a_seq && (b.is(K::kInt) || b.is(K::kBool))) return repeat(a, b.to_int());
    if (b_seq && (a.is(K::kInt) || a.is(K::kBool))) return repeat(b, a.to_int());
  }
  throw RenderError("unsupported operand type(s) for " + operator_symbol(op) + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
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

class Renderer {
 public:
  explicit Renderer(const Dict& globals) {
    install_builtins();
    for (const auto& [k, v] : globals.items) root_.vars[k] = v;
  }

  std::string render(const Template& t) {
    std::string out;
    out_ = &out;
    try {
      exec_body(t.body);
    } catch (const RenderError& e) {
      throw_runtime_error("chat template line ", line_, ": ", e.what());
    }
    return out;
  }

 private:
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    Frame* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  // Runs `fn` with `frame` as the innermost scope (and output to `out` when given).
  template <typename Fn>
  auto in_frame(Frame* frame, std::string* out, Fn fn) {
    struct Restore {
      Renderer* r;
      Frame* frame;
      std::string* out;
      ~Restore() {
        r->frame_ = frame;
        r->out_ = out;
      }
    } restore{this, frame_, out_};
    frame_ = frame;
    if (out != nullptr) out_ = out;
    return fn();
  }

  void install_builtins() {
    Dict& g = builtins_;
    g.set("namespace", Value::callable("namespace", [](CallArgs& a) {
            Dict attrs;
            for (const Value& p : a.positional) {
              if (!p.is(K::kDict)) throw RenderError("namespace() takes a dict or keyword arguments");
              for (const auto& [k, v] : p.as_dict().items) attrs.set(k, v);
            }
            for (auto& [k, v] : a.keyword) attrs.set(k, v);
            return Value::make_namespace(std::move(attrs));
          }));
    g.set("dict", Value::callable("dict", [](CallArgs& a) {
            Dict d;
            for (const Value& p : a.positional) {
              if (!p.is(K::kDict)) throw RenderError("dict() takes a dict or keyword arguments");
              for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
            }
            for (auto& [k, v] : a.keyword) d.set(k, v);
            return Value(std::move(d));
          }));
    g.set("range", Value::callable("range", [](CallArgs& a) {
            if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) {
              throw RenderError("range() takes 1 to 3 positional arguments");
            }
            for (const Value& v : a.positional) {
              if (!v.is(K::kInt) && !v.is(K::kBool))
                throw RenderError("range() arguments must be int, not " + v.type_name());
            }
            const int64_t start = a.positional.size() > 1 ? a.positional[0].to_int() : 0;
            const int64_t stop = a.positional.size() > 1 ? a.positional[1].to_int() : a.positional[0].to_int();
            const int64_t step = a.positional.size() > 2 ? a.positional[2].to_int() : 1;
            if (step == 0) throw RenderError("range() arg 3 must not be zero");
            List out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
              if (static_cast<int64_t>(out.size()) >= kMaxRange)
                throw RenderError("range() is too big (at most 100000 items)");
              out.emplace_back(i);
            }
            return Value(std::move(out));
          }));
    g.set("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
            throw_runtime_error(a.positional.empty() ? std::string("raise_exception() called") : a.positional[0].str());
          }));
    g.set("strftime_now", Value::callable("strftime_now", [](CallArgs& a) {
            if (a.positional.size() != 1 || !a.positional[0].is_string())
              throw RenderError("strftime_now() takes a format string");
            const std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            char buf[256];
            const size_t n = std::strftime(buf, sizeof(buf), a.positional[0].as_string().c_str(), &tm);
            return Value(std::string(buf, n));
          }));
    for (const auto& [k, v] : g.items) root_.vars[k] = v;
  }

  Value lookup(const std::string& name) const {
    for (const Frame* f = frame_; f != nullptr; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return Value::undefined(name);
  }

  Flow exec_body(const Body& body) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::kText:
        *out_ += static_cast<const TextStmt&>(s).text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        *out_ += eval(*static_cast<const OutputStmt&>(s).expr).str();
        return Flow::kNormal;
      case Stmt::Kind::kIf: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [cond, body] : st.branches) {
          if (eval(*cond).truthy()) return exec_body(body);
        }
        return exec_body(st.else_body);
      }
      case Stmt::Kind::kFor:
        return exec_for(static_cast<const ForStmt&>(s));
      case Stmt::Kind::kSet:
        exec_set(static_cast<const SetStmt&>(s));
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        std::string captured;
        in_frame(frame_, &captured, [&] { return exec_body(st.body); });
        frame_->vars[st.target] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        define_macro(static_cast<const MacroStmt&>(s));
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void bind(Frame* f, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      f->vars[targets[0]] = v;
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size()) {
      throw RenderError("cannot unpack " + std::to_string(items.size()) + " values into " +
                        std::to_string(targets.size()) + " variables");
    }
    for (size_t i = 0; i < targets.size(); ++i) f->vars[targets[i]] = items[i];
  }

  Flow exec_for(const ForStmt& st) {
    List items = iterate(eval(*st.iter));
    if (st.filter) {
      List kept;
      for (Value& item : items) {
        Frame f{{}, frame_};
        bind(&f, st.targets, item);
        if (in_frame(&f, nullptr, [&] { return eval(*st.filter); }).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(st.else_body);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Frame f{{}, frame_};
      bind(&f, st.targets, items[static_cast<size_t>(i)]);
      Dict loop;
      loop.items = {{"index0", Value(i)},       {"index", Value(i + 1)},  {"revindex0", Value(n - 1 - i)},
                    {"revindex", Value(n - i)}, {"first", Value(i == 0)}, {"last", Value(i == n - 1)},
                    {"length", Value(n)},       {"depth", Value(1)},      {"depth0", Value(0)}};
      if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.set("cycle", Value::callable("cycle", [i](CallArgs& a) {
                 if (a.positional.empty()) throw RenderError("loop.cycle() needs at least one value");
                 return a.positional[static_cast<size_t>(i) % a.positional.size()];
               }));
      f.vars["loop"] = Value(std::move(loop));
      if (in_frame(&f, nullptr, [&] { return exec_body(st.body); }) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void exec_set(const SetStmt& st) {
    Value v = eval(*st.value);
    if (st.attribute.empty()) return bind(frame_, st.targets, v);
    const Value target = lookup(st.targets[0]);
    if (!target.is(K::kNamespace)) {
      throw RenderError("cannot set attribute '" + st.attribute + "' of '" + st.targets[0] + "' (a " +
                        target.type_name() + "): only namespace() objects have assignable attributes");
    }
    target.as_namespace().attrs.set(st.attribute, std::move(v));
  }

  void define_macro(const MacroStmt& st) {
    frame_->vars[st.name] = Value::callable(st.name, [this, &st](CallArgs& a) {
      if (a.positional.size() > st.params.size()) {
        throw RenderError("macro '" + st.name + "' takes " + std::to_string(st.params.size()) + " arguments");
      }
      if (++macro_depth_ > kMaxMacroDepth) throw RenderError("macro recursion too deep");
      Frame f{{}, &root_};
      std::string captured;
      in_frame(&f, &captured, [&] {
        for (size_t i = 0; i < st.params.size(); ++i) {
          const auto& [name, def] = st.params[i];
          const Value* given = i < a.positional.size() ? &a.positional[i] : nullptr;
          for (const auto& [k, v] : a.keyword) {
            if (k == name) given = &v;
          }
          f.vars[name] = given != nullptr ? *given : def ? eval(*def) : Value::undefined(name);
        }
        for (const auto& [k, v] : a.keyword) {
          bool known = false;
          for (const auto& p : st.params) known |= p.first == k;
          if (!known) throw RenderError("macro '" + st.name + "' has no parameter '" + k + "'");
        }
        return exec_body(st.body);
      });
      --macro_depth_;
      return Value(std::move(captured));
    });
  }

  CallArgs eval_args(const Args& args) {
    CallArgs out;
    for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e));
    for (const auto& [k, e] : args.keyword) out.keyword.emplace_back(k, eval(*e));
    return out;
  }

  Value call(const CallExpr& e) {
    Value fn;
    CallArgs args;
    if (e.callee->kind == Expr::Kind::kGetattr) {
      const auto& ga = static_cast<const GetattrExpr&>(*e.callee);
      const Value obj = eval(*ga.object);
      args = eval_args(e.args);
      line_ = e.line;
      Value result;
      if (call_method(obj, ga.name, args, &result)) return result;
      fn = get_attribute(obj, ga.name);
      if (fn.is_undefined() && (obj.is_string() || obj.is(K::kDict) || obj.is(K::kList))) {
        throw RenderError("'" + obj.type_name() + "' object has no method '" + ga.name + "' in pagoda's Jinja subset");
      }
    } else {
      fn = eval(*e.callee);
      args = eval_args(e.args);
      line_ = e.line;
    }
    if (fn.is(K::kCallable)) return fn.as_callable().fn(args);
    if (fn.is_undefined()) undefined_error(fn);
    throw RenderError("'" + fn.type_name() + "' object is not callable");
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return static_cast<const LiteralExpr&>(e).value;
      case Expr::Kind::kName:
        return lookup(static_cast<const NameExpr&>(e).name);
      case Expr::Kind::kList: {
        const auto& list = static_cast<const ListExpr&>(e);
        List items;
        items.is_tuple = list.is_tuple;
        for (const ExprPtr& item : list.items) items.push_back(eval(*item));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
          const Value key = eval(*k);
          if (!key.is_string())
            throw RenderError("dict keys must be strings in pagoda's Jinja subset, not " + key.type_name());
          d.set(key.as_string(), eval(*v));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kGetattr: {
        const auto& g = static_cast<const GetattrExpr&>(e);
        return get_attribute(eval(*g.object), g.name);
      }
      case Expr::Kind::kGetitem: {
        const auto& g = static_cast<const GetitemExpr&>(e);
        const Value obj = eval(*g.object);
        return get_item(obj, eval(*g.index));
      }
      case Expr::Kind::kSlice: {
        const auto& s = static_cast<const SliceExpr&>(e);
        const Value obj = eval(*s.object);
        const Value start = s.start ? eval(*s.start) : Value(nullptr);
        const Value stop = s.stop ? eval(*s.stop) : Value(nullptr);
        const Value step = s.step ? eval(*s.step) : Value(nullptr);
        return get_slice(obj, &start, &stop, &step);
      }
      case Expr::Kind::kCall:
        return call(static_cast<const CallExpr&>(e));
      case Expr::Kind::kFilter: {
        const auto& f = static_cast<const FilterExpr&>(e);
        const Value v = eval(*f.object);
        CallArgs args = eval_args(f.args);
        line_ = e.line;
        return apply_filter(f.name, v, args);
      }
      case Expr::Kind::kTest: {
        const auto& t = static_cast<const TestExpr&>(e);
        const Value v = eval(*t.object);
        CallArgs args = eval_args(t.args);
        line_ = e.line;
        return Value(apply_test(t.name, v, args) != t.negated);
      }
      case Expr::Kind::kUnary: {
        const auto& u = static_cast<const UnaryExpr&>(e);
        const Value v = eval(*u.operand);
        if (u.op == UnaryOp::kNot) return Value(!v.truthy());
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number())
          throw RenderError("bad operand type for unary " + std::string(u.op == UnaryOp::kNeg ? "-" : "+") + ": '" +
                            v.type_name() + "'");
        if (u.op == UnaryOp::kPos) return v.is(K::kFloat) ? v : Value(v.to_int());
        return v.is(K::kFloat) ? Value(-v.as_float()) : Value(-v.to_int());
      }
      case Expr::Kind::kBinary: {
        const auto& b = static_cast<const BinaryExpr&>(e);
        Value left = eval(*b.left);
        if (b.op == BinaryOp::kAnd) return left.truthy() ? eval(*b.right) : left;
        if (b.op == BinaryOp::kOr) return left.truthy() ? left : eval(*b.right);
        const Value right = eval(*b.right);
        line_ = e.line;
        if (b.op == BinaryOp::kConcat) return Value(left.str() + right.str());
        return arithmetic(b.op, left, right);
      }
      case Expr::Kind::kCompare: {
        const auto& c = static_cast<const CompareExpr&>(e);
        Value left = eval(*c.first);
        for (const auto& [op, expr] : c.rest) {
          Value right = eval(*expr);
          line_ = e.line;
          if (!compare(op, left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        const auto& c = static_cast<const CondExpr&>(e);
        if (eval(*c.cond).truthy()) return eval(*c.then_expr);
        return c.else_expr ? eval(*c.else_expr) : Value::undefined("");
      }
    }
    return Value();
  }

  Dict builtins_;
  Frame root_;
  Frame* frame_ = &root_;
  std::string* out_ = nullptr;
  int line_ = 0;  // line of the node being evaluated, for error messages
  int macro_depth_ = 0;
};

}  // namespace

std::string render_template(const Template& t, const Dict& globals) { return Renderer(globals).render(t); }

}  // namespace pagoda::jinja
