#include "pagoda/jinja/eval.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <unordered_map>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/jinja/builtins.h"
#include "pagoda/jinja/operators.h"

namespace pagoda::jinja {
namespace {

using K = Value::Kind;
using Clock = std::chrono::steady_clock;

constexpr int kMaxMacroDepth = 200;  // a macro calling itself, or macros calling each other, in a cycle
// Statements, expressions and macro calls being evaluated at once. One template's nesting is bounded by the
// parser; macro calls stack it. A level takes up to about 700 bytes of stack in a release build (measured
// with recursive macros on threads of small stacks), so this stays near 384 KiB; real templates need < 100.
constexpr int kMaxEvalDepth = 500;
// An iteration builds a scope and a loop object of a dozen values: as much work as several expressions.
constexpr int64_t kLoopIterationSteps = 4;
// Steps between looks at the cancel flag and the clock: cheap, and a fraction of a millisecond apart.
constexpr int64_t kCheckInterval = 1024;

[[noreturn]] void undefined_error(const Value& v) {
  throw RenderError(v.undefined_name().empty() ? std::string("undefined value")
                                               : "'" + v.undefined_name() + "' is undefined");
}

class Renderer {
 public:
  Renderer(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
    install_builtins();
    for (const auto& [k, v] : globals.items) root_.vars[k] = v;
  }

  std::string render(const Template& t) {
    if (limits_.timeout > Clock::duration::zero()) deadline_ = Clock::now() + limits_.timeout;
    check_stop();
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

  // Counts `n` steps of work; every kCheckInterval steps, looks at the cancel flag and the clock.
  void step(int64_t n = 1) {
    if (n > limits_.max_steps - steps_) {
      throw RenderError(str_cat("rendering exceeded ", limits_.max_steps, " steps (RenderLimits::max_steps)"));
    }
    steps_ += n;
    if (steps_ >= next_check_) {
      next_check_ = steps_ + kCheckInterval;
      check_stop();
    }
  }

  // Not RenderError: a stopped rendering is not the template's fault, so it names no template line.
  void check_stop() const {
    if (limits_.cancel != nullptr && limits_.cancel->load(std::memory_order_relaxed)) {
      throw_runtime_error("chat template: rendering cancelled");
    }
    if (deadline_ && Clock::now() > *deadline_) {
      throw_runtime_error("chat template: rendering exceeded its time limit of ",
                          std::chrono::duration_cast<std::chrono::milliseconds>(limits_.timeout).count(), " ms");
    }
  }

  // The work of making or copying `v`, and the size bound on strings.
  const Value& charge(const Value& v) {
    switch (v.kind()) {
      case K::kString:
        if (v.as_string().size() > limits_.max_output_bytes) {
          throw RenderError(str_cat("a string longer than the output limit (", limits_.max_output_bytes,
                                    " bytes, RenderLimits::max_output_bytes)"));
        }
        step(1 + static_cast<int64_t>(v.as_string().size() / 16));
        break;
      case K::kList:
        step(1 + static_cast<int64_t>(v.as_list().size() / 8));
        break;
      case K::kDict:
        step(1 + static_cast<int64_t>(v.as_dict().items.size() / 8));
        break;
      case K::kUndefined:
      case K::kNone:
      case K::kBool:
      case K::kInt:
      case K::kFloat:
      case K::kNamespace:
      case K::kCallable:
        step();
        break;
    }
    return v;
  }

  // The work of an operation that walks `v` (compares, prints, copies or sorts it). Lists and dicts are
  // shared, not copied, when looked up, so they are charged here rather than in charge().
  void charge_walk(const Value& v) {
    if (v.is(K::kList) || v.is(K::kDict)) {
      const uint64_t w = nesting_of(v).weight / 64;
      step(w > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(w));
    }
  }

  void charge_walk(const CallArgs& args) {
    for (const Value& v : args.positional) charge_walk(v);
    for (const auto& [k, v] : args.keyword) charge_walk(v);
  }

  void emit(const std::string& text) {
    if (text.size() > limits_.max_output_bytes - out_->size()) {
      throw RenderError(
          str_cat("output longer than ", limits_.max_output_bytes, " bytes (RenderLimits::max_output_bytes)"));
    }
    *out_ += text;
    step(static_cast<int64_t>(text.size() / 16));
  }

  // Holds one level of evaluation depth while alive.
  class DepthGuard {
   public:
    DepthGuard(int* depth, int max, const char* what) : depth_(depth) {
      if (++*depth_ > max) {
        --*depth_;
        throw RenderError(str_cat(what, " (more than ", max, " levels)"));
      }
    }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

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
    g.set("range", Value::callable("range", [](CallArgs& a) { return make_range(a); }));
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
    const DepthGuard guard(&depth_, kMaxEvalDepth, "statements, expressions and macro calls nested too deep");
    step();
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(static_cast<const TextStmt&>(s).text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        const Value v = eval(*static_cast<const OutputStmt&>(s).expr);
        charge_walk(v);
        emit(v.str());
        return Flow::kNormal;
      }
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
    const Value iterable = eval(*st.iter);
    charge_walk(iterable);
    List items = iterate(iterable);
    if (st.filter) {
      List kept;
      for (Value& item : items) {
        step();
        Frame f{{}, frame_};
        bind(&f, st.targets, item);
        if (in_frame(&f, nullptr, [&] { return eval(*st.filter); }).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(st.else_body);
    const auto n = static_cast<int64_t>(items.size());
    // One cycle() for the whole loop, reading the current index (as Jinja2's single loop object does).
    const auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::callable("cycle", [index](CallArgs& a) {
      if (a.positional.empty()) throw RenderError("loop.cycle() needs at least one value");
      return a.positional[static_cast<size_t>(*index) % a.positional.size()];
    });
    for (int64_t i = 0; i < n; ++i) {
      step(kLoopIterationSteps);
      *index = i;
      Frame f{{}, frame_};
      bind(&f, st.targets, items[static_cast<size_t>(i)]);
      Dict loop;
      loop.items.reserve(12);
      auto add = [&loop](const char* key, Value v) { loop.items.emplace_back(key, std::move(v)); };
      add("index0", Value(i));
      add("index", Value(i + 1));
      add("revindex0", Value(n - 1 - i));
      add("revindex", Value(n - i));
      add("first", Value(i == 0));
      add("last", Value(i == n - 1));
      add("length", Value(n));
      add("depth", Value(1));
      add("depth0", Value(0));
      if (i > 0) add("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) add("nextitem", items[static_cast<size_t>(i + 1)]);
      add("cycle", cycle);
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
    target.as_namespace().set(st.attribute, std::move(v));
  }

  void define_macro(const MacroStmt& st) {
    frame_->vars[st.name] = Value::callable(st.name, [this, &st](CallArgs& a) {
      if (a.positional.size() > st.params.size()) {
        throw RenderError("macro '" + st.name + "' takes " + std::to_string(st.params.size()) + " arguments");
      }
      const DepthGuard guard(&macro_depth_, kMaxMacroDepth, "macro recursion too deep");
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
      charge_walk(obj);
      charge_walk(args);
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
      charge_walk(args);
    }
    if (fn.is(K::kCallable)) return fn.as_callable().fn(args);
    if (fn.is_undefined()) undefined_error(fn);
    throw RenderError("'" + fn.type_name() + "' object is not callable");
  }

  Value eval(const Expr& e) {
    const DepthGuard guard(&depth_, kMaxEvalDepth, "statements, expressions and macro calls nested too deep");
    Value v = eval_node(e);
    charge(v);
    return v;
  }

  Value eval_node(const Expr& e) {
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
        charge_walk(obj);
        return get_slice(obj, &start, &stop, &step);
      }
      case Expr::Kind::kCall:
        return call(static_cast<const CallExpr&>(e));
      case Expr::Kind::kFilter: {
        const auto& f = static_cast<const FilterExpr&>(e);
        const Value v = eval(*f.object);
        CallArgs args = eval_args(f.args);
        line_ = e.line;
        // length and default do not walk their input; the others may.
        if (f.name != "length" && f.name != "count" && f.name != "default" && f.name != "d") charge_walk(v);
        charge_walk(args);
        return apply_filter(f.name, v, args);
      }
      case Expr::Kind::kTest: {
        const auto& t = static_cast<const TestExpr&>(e);
        const Value v = eval(*t.object);
        CallArgs args = eval_args(t.args);
        line_ = e.line;
        charge_walk(v);
        charge_walk(args);
        return Value(apply_test(t.name, v, args) != t.negated);
      }
      case Expr::Kind::kUnary: {
        const auto& u = static_cast<const UnaryExpr&>(e);
        const Value v = eval(*u.operand);
        line_ = e.line;
        return unary_operator(u.op, v);
      }
      case Expr::Kind::kBinary: {
        const auto& b = static_cast<const BinaryExpr&>(e);
        Value left = eval(*b.left);
        if (b.op == BinaryOp::kAnd) return left.truthy() ? eval(*b.right) : left;
        if (b.op == BinaryOp::kOr) return left.truthy() ? left : eval(*b.right);
        const Value right = eval(*b.right);
        line_ = e.line;
        charge_walk(left);
        charge_walk(right);
        if (b.op == BinaryOp::kConcat) {
          std::string joined = left.str();
          const std::string r = right.str();
          if (joined.size() + r.size() > limits_.max_output_bytes) {
            throw RenderError(str_cat("a string longer than the output limit (", limits_.max_output_bytes,
                                      " bytes, RenderLimits::max_output_bytes)"));
          }
          joined += r;
          return Value(std::move(joined));
        }
        return binary_operator(b.op, left, right, limits_.max_output_bytes);
      }
      case Expr::Kind::kCompare: {
        const auto& c = static_cast<const CompareExpr&>(e);
        Value left = eval(*c.first);
        for (const auto& [op, expr] : c.rest) {
          Value right = eval(*expr);
          line_ = e.line;
          charge_walk(left);
          charge_walk(right);
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

  const RenderLimits& limits_;
  int64_t steps_ = 0;
  int64_t next_check_ = kCheckInterval;
  std::optional<Clock::time_point> deadline_;
  int depth_ = 0;  // statements and expressions being evaluated
  Dict builtins_;
  Frame root_;
  Frame* frame_ = &root_;
  std::string* out_ = nullptr;
  int line_ = 0;  // line of the node being evaluated, for error messages
  int macro_depth_ = 0;
};

}  // namespace

std::string render_template(const Template& t, const Dict& globals, const RenderLimits& limits) {
  return Renderer(globals, limits).render(t);
}

}  // namespace pagoda::jinja
