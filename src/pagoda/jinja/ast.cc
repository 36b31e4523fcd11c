#include "pagoda/jinja/ast.h"

#include <algorithm>

namespace pagoda::jinja {

int children_height(const Expr& e) {
  int h = 0;
  auto add = [&h](const ExprPtr& c) {
    if (c) h = std::max(h, c->height);
  };
  auto add_args = [&](const Args& a) {
    for (const ExprPtr& c : a.positional) add(c);
    for (const auto& [k, c] : a.keyword) add(c);
  };
  switch (e.kind) {
    case Expr::Kind::kLiteral:
    case Expr::Kind::kName:
      break;
    case Expr::Kind::kList:
      for (const ExprPtr& c : static_cast<const ListExpr&>(e).items) add(c);
      break;
    case Expr::Kind::kDict:
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        add(k);
        add(v);
      }
      break;
    case Expr::Kind::kGetattr:
      add(static_cast<const GetattrExpr&>(e).object);
      break;
    case Expr::Kind::kGetitem:
      add(static_cast<const GetitemExpr&>(e).object);
      add(static_cast<const GetitemExpr&>(e).index);
      break;
    case Expr::Kind::kSlice: {
      const auto& s = static_cast<const SliceExpr&>(e);
      for (const ExprPtr* c : {&s.object, &s.start, &s.stop, &s.step}) add(*c);
      break;
    }
    case Expr::Kind::kCall:
      add(static_cast<const CallExpr&>(e).callee);
      add_args(static_cast<const CallExpr&>(e).args);
      break;
    case Expr::Kind::kFilter:
      add(static_cast<const FilterExpr&>(e).object);
      add_args(static_cast<const FilterExpr&>(e).args);
      break;
    case Expr::Kind::kTest:
      add(static_cast<const TestExpr&>(e).object);
      add_args(static_cast<const TestExpr&>(e).args);
      break;
    case Expr::Kind::kUnary:
      add(static_cast<const UnaryExpr&>(e).operand);
      break;
    case Expr::Kind::kBinary:
      add(static_cast<const BinaryExpr&>(e).left);
      add(static_cast<const BinaryExpr&>(e).right);
      break;
    case Expr::Kind::kCompare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      add(c.first);
      for (const auto& [op, r] : c.rest) add(r);
      break;
    }
    case Expr::Kind::kCond: {
      const auto& c = static_cast<const CondExpr&>(e);
      for (const ExprPtr* x : {&c.cond, &c.then_expr, &c.else_expr}) add(*x);
      break;
    }
  }
  return h;
}

}  // namespace pagoda::jinja
