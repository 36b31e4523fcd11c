// Syntax tree of pagoda's Jinja subset, built by parser.cc and walked by eval.cc. Every node carries the
// template line it starts on, for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pagoda/jinja/value.h"

namespace pagoda::jinja {

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kGetattr,
    kGetitem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kCompare,
    kCond
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  const Kind kind;
  const int line;
  // Nodes on the longest path down from here (1 for a leaf), set and bounded by the parser so that the
  // renderer's recursion and the tree's destruction stay shallow.
  int height = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

// Arguments of a call, filter or test: f(a, b, key=c).
struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(int l, Value v) : Expr(Kind::kLiteral, l), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(int l, std::string n) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // [a, b], or a tuple: (a, b) or a, b
  ListExpr(int l, bool tuple) : Expr(Kind::kList, l), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};
struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetattrExpr : Expr {  // object.name
  GetattrExpr(int l, ExprPtr o, std::string n) : Expr(Kind::kGetattr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct GetitemExpr : Expr {  // object[index]
  GetitemExpr(int l, ExprPtr o, ExprPtr i) : Expr(Kind::kGetitem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr : Expr {  // object[start:stop:step]; absent parts are null
  SliceExpr(int l, ExprPtr o) : Expr(Kind::kSlice, l), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};
struct CallExpr : Expr {  // callee(args); a method call when callee is a GetattrExpr
  CallExpr(int l, ExprPtr c) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};
struct FilterExpr : Expr {  // object | name(args)
  FilterExpr(int l, ExprPtr o, std::string n) : Expr(Kind::kFilter, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
  Args args;
};
struct TestExpr : Expr {  // object is [not] name(args)
  TestExpr(int l, ExprPtr o, std::string n) : Expr(Kind::kTest, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
  Args args;
  bool negated = false;
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(int l, UnaryOp o, ExprPtr e) : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
struct BinaryExpr : Expr {
  BinaryExpr(int l, BinaryOp o, ExprPtr a, ExprPtr b)
      : Expr(Kind::kBinary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  BinaryOp op;
  ExprPtr left, right;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
struct CompareExpr : Expr {  // a < b <= c: each pair compared, joined by `and`
  CompareExpr(int l, ExprPtr f) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct CondExpr : Expr {  // then_expr if cond else else_expr; no else gives Undefined
  CondExpr(int l, ExprPtr c, ExprPtr t, ExprPtr e)
      : Expr(Kind::kCond, l), cond(std::move(c)), then_expr(std::move(t)), else_expr(std::move(e)) {}
  ExprPtr cond, then_expr, else_expr;
};

// Largest height among an expression's direct children (0 for a leaf); the parser sets each node's height
// from it as the node is finished.
int children_height(const Expr& e);

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  const Kind kind;
  const int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(int l, std::string t) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};
struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(int l, ExprPtr e) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {  // if / elif ... / else
  explicit IfStmt(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};
struct ForStmt : Stmt {  // for a[, b] in iter [if filter] ... [else ...]
  explicit ForStmt(int l) : Stmt(Kind::kFor, l) {}
  std::vector<std::string> targets;
  ExprPtr iter;
  ExprPtr filter;  // may be null
  Body body;
  Body else_body;  // runs when nothing was iterated
};
struct SetStmt : Stmt {  // set a[, b] = value   or   set ns.attr = value
  explicit SetStmt(int l) : Stmt(Kind::kSet, l) {}
  std::vector<std::string> targets;
  std::string attribute;  // non-empty: targets[0] is a namespace and this its attribute
  ExprPtr value;
};
struct SetBlockStmt : Stmt {  // set name %}...{% endset
  explicit SetBlockStmt(int l) : Stmt(Kind::kSetBlock, l) {}
  std::string target;
  Body body;
};
struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};
struct LoopControlStmt : Stmt {  // break / continue (jinja2.ext.loopcontrols, which Hugging Face enables)
  LoopControlStmt(int l, bool is_break) : Stmt(is_break ? Kind::kBreak : Kind::kContinue, l) {}
};

struct Template {
  Body body;
};

}  // namespace pagoda::jinja
