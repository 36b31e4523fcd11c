#include "pagoda/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "pagoda/core/strings.h"
#include "pagoda/jinja/lexer.h"

namespace pagoda::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
    case TokenKind::kOp:
    case TokenKind::kInt:
    case TokenKind::kFloat:
      return "'" + t.text + "'";
    case TokenKind::kString:
      return "a string literal";
    case TokenKind::kEof:
      return "the end of the template";
  }
  return "?";
}

// Deeper nesting (of blocks or of brackets and unary operators) is refused, so that a hostile template
// cannot overflow the stack of the recursive parser and renderer.
constexpr int kMaxNesting = 200;
// Taller expressions are refused: chains of operators, filters, attributes and calls (a + a + ... + a,
// x.a.b.c..., x|f|f|f) nest without brackets. Real templates stay under 20.
constexpr int kMaxExprHeight = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::shared_ptr<const Template> parse() {
    auto t = std::make_shared<Template>();
    parse_body({}, &t->body);
    return t;
  }

 private:
  // An open block, for "expected 'endif'" messages and for break/continue outside loops.
  struct Open {
    std::string tag;
    int line;
    std::vector<std::string> ends;
    bool is_loop;  // break/continue allowed inside
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& expected) const {
    throw_syntax_error(cur().line, "expected " + expected + ", found " + describe(cur()));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("'" + std::string(op) + "'");
  }
  std::string expect_name(const std::string& what) {
    if (cur().kind != TokenKind::kName) fail(what);
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end(const std::string& after) {
    if (cur().kind != TokenKind::kBlockEnd) fail("'%}' after " + after);
    next();
  }

  // Statements up to a block tag named in `ends` (left as the current token, its name returned) or, when
  // `ends` is empty, the end of the template.
  std::string parse_body(std::initializer_list<std::string_view> ends, Body* body) {
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kText:
          body->push_back(std::make_unique<TextStmt>(t.line, t.text));
          next();
          break;
        case TokenKind::kVarBegin: {
          const int line = t.line;
          next();
          ExprPtr e = parse_tuple(true);
          if (cur().kind != TokenKind::kVarEnd) fail("'}}'");
          next();
          body->push_back(std::make_unique<OutputStmt>(line, std::move(e)));
          break;
        }
        case TokenKind::kBlockBegin: {
          next();
          if (cur().kind != TokenKind::kName) fail("a tag name after '{%'");
          const std::string name = cur().text;
          if (std::find(ends.begin(), ends.end(), name) != ends.end()) return name;
          parse_statement(body);
          break;
        }
        case TokenKind::kEof:
          if (ends.size() == 0) return "";
          fail(expected_ends());
        default:
          fail("template text, '{{' or '{%'");
      }
    }
  }

  std::string expected_ends() const {
    const Open& o = open_.back();
    std::vector<std::string> quoted;
    for (const auto& e : o.ends) quoted.push_back("'" + e + "'");
    return str_cat(join(quoted, " or "), " (to close the '", o.tag, "' of line ", o.line, ")");
  }

  void parse_statement(Body* body) {
    NestingGuard guard(this);
    const int line = cur().line;
    const std::string tag = cur().text;
    next();
    if (tag == "if") return parse_if(line, body);
    if (tag == "for") return parse_for(line, body);
    if (tag == "set") return parse_set(line, body);
    if (tag == "macro") return parse_macro(line, body);
    if (tag == "break" || tag == "continue") {
      const bool in_loop = std::any_of(open_.begin(), open_.end(), [](const Open& o) { return o.is_loop; });
      if (!in_loop) throw_syntax_error(line, "'" + tag + "' outside a for loop");
      expect_block_end("'" + tag + "'");
      body->push_back(std::make_unique<LoopControlStmt>(line, tag == "break"));
      return;
    }
    if (tag == "generation") {  // Hugging Face's assistant-mask marker: renders its body
      expect_block_end("'generation'");
      open_.push_back({"generation", line, {"endgeneration"}, false});
      parse_body({"endgeneration"}, body);
      close_block("endgeneration");
      return;
    }
    if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      if (open_.empty()) throw_syntax_error(line, "unexpected '" + tag + "' with no open block");
      throw_syntax_error(line, "expected " + expected_ends() + ", found '" + tag + "'");
    }
    for (const char* unsupported :
         {"include", "import", "from", "extends", "block", "call", "filter", "with", "do", "autoescape", "trans"}) {
      if (tag == unsupported)
        throw_syntax_error(line, "the '" + tag + "' tag is not supported by pagoda's Jinja subset");
    }
    throw_syntax_error(line, "unknown tag '" + tag + "'");
  }

  // At the tag named `end`: consumes it and its %}, and pops the open block.
  void close_block(const std::string& end) {
    next();
    expect_block_end("'" + end + "'");
    open_.pop_back();
  }

  void parse_if(int line, Body* body) {
    auto stmt = std::make_unique<IfStmt>(line);
    open_.push_back({"if", line, {"elif", "else", "endif"}, false});
    ExprPtr cond = parse_tuple(true);
    expect_block_end("the 'if' condition");
    while (true) {
      Body branch;
      const std::string end = parse_body({"elif", "else", "endif"}, &branch);
      stmt->branches.emplace_back(std::move(cond), std::move(branch));
      if (end == "elif") {
        next();
        cond = parse_tuple(true);
        expect_block_end("the 'elif' condition");
        continue;
      }
      if (end == "else") {
        next();
        expect_block_end("'else'");
        open_.back().ends = {"endif"};
        parse_body({"endif"}, &stmt->else_body);
      }
      break;
    }
    close_block("endif");
    body->push_back(std::move(stmt));
  }

  void parse_for(int line, Body* body) {
    auto stmt = std::make_unique<ForStmt>(line);
    const bool paren = skip_op("(");
    do {
      stmt->targets.push_back(expect_name("a loop variable name"));
    } while (skip_op(","));
    if (paren) expect_op(")");
    if (!is_name("in")) fail("'in' after the loop variables");
    next();
    stmt->iter = parse_tuple(false);
    if (is_name("if")) {
      next();
      stmt->filter = parse_tuple(true);
    }
    if (is_name("recursive")) throw_syntax_error(cur().line, "recursive for loops are not supported");
    expect_block_end("the 'for' header");
    open_.push_back({"for", line, {"else", "endfor"}, true});
    if (parse_body({"else", "endfor"}, &stmt->body) == "else") {
      next();
      expect_block_end("'else'");
      open_.back().ends = {"endfor"};
      open_.back().is_loop = false;  // break/continue in the else part belong to an outer loop
      parse_body({"endfor"}, &stmt->else_body);
    }
    close_block("endfor");
    body->push_back(std::move(stmt));
  }

  void parse_set(int line, Body* body) {
    std::vector<std::string> targets{expect_name("a variable name after 'set'")};
    std::string attribute;
    if (skip_op(".")) {
      attribute = expect_name("an attribute name");
    } else {
      while (skip_op(",")) targets.push_back(expect_name("a variable name"));
    }
    if (skip_op("=")) {
      auto stmt = std::make_unique<SetStmt>(line);
      stmt->targets = std::move(targets);
      stmt->attribute = std::move(attribute);
      stmt->value = parse_tuple(true);
      expect_block_end("the 'set' value");
      body->push_back(std::move(stmt));
      return;
    }
    if (targets.size() != 1 || !attribute.empty() || cur().kind != TokenKind::kBlockEnd) fail("'='");
    next();
    auto stmt = std::make_unique<SetBlockStmt>(line);
    stmt->target = targets[0];
    open_.push_back({"set", line, {"endset"}, false});
    parse_body({"endset"}, &stmt->body);
    close_block("endset");
    body->push_back(std::move(stmt));
  }

  void parse_macro(int line, Body* body) {
    auto stmt = std::make_unique<MacroStmt>(line);
    stmt->name = expect_name("a macro name");
    expect_op("(");
    while (!skip_op(")")) {
      std::string name = expect_name("a parameter name");
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      stmt->params.emplace_back(std::move(name), std::move(def));
      if (!is_op(")")) expect_op(",");
    }
    expect_block_end("the macro signature");
    // A loop around the macro is not the macro body's loop: break/continue inside must have their own.
    std::vector<Open> outer = std::exchange(open_, {Open{"macro", line, {"endmacro"}, false}});
    parse_body({"endmacro"}, &stmt->body);
    close_block("endmacro");
    open_ = std::move(outer);
    body->push_back(std::move(stmt));
  }

  // ---- expressions, lowest precedence first ----

  // a, b, c without brackets is a tuple (in {{ }}, for headers, set values).
  ExprPtr parse_tuple(bool with_condexpr) {
    const int line = cur().line;
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = std::make_unique<ListExpr>(line, true);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (!starts_expression()) break;  // trailing comma
      tuple->items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return done(std::move(tuple));
  }

  bool starts_expression() const {
    switch (cur().kind) {
      case TokenKind::kName:
      case TokenKind::kString:
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return true;
      case TokenKind::kOp:
        return is_op("(") || is_op("[") || is_op("{") || is_op("-") || is_op("+");
      default:
        return false;
    }
  }

  ExprPtr parse_expression() {
    NestingGuard guard(this);
    const int line = cur().line;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        next();
        otherwise = parse_expression();
      }
      e = done(std::make_unique<CondExpr>(line, std::move(cond), std::move(e), std::move(otherwise)));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      ExprPtr right = parse_and();
      e = done(std::make_unique<BinaryExpr>(line, BinaryOp::kOr, std::move(e), std::move(right)));
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      ExprPtr right = parse_not();
      e = done(std::make_unique<BinaryExpr>(line, BinaryOp::kAnd, std::move(e), std::move(right)));
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const int line = cur().line;
      next();
      NestingGuard guard(this);
      return done(std::make_unique<UnaryExpr>(line, UnaryOp::kNot, parse_not()));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_arithmetic();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CompareOp op;
      if (is_op("=="))
        op = CompareOp::kEq;
      else if (is_op("!="))
        op = CompareOp::kNe;
      else if (is_op("<"))
        op = CompareOp::kLt;
      else if (is_op("<="))
        op = CompareOp::kLe;
      else if (is_op(">"))
        op = CompareOp::kGt;
      else if (is_op(">="))
        op = CompareOp::kGe;
      else if (is_name("in"))
        op = CompareOp::kIn;
      else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      next();
      if (!cmp) cmp = std::make_unique<CompareExpr>(line, std::move(first));
      cmp->rest.emplace_back(op, parse_arithmetic());
    }
    if (cmp) return done(std::move(cmp));
    return first;
  }

  // Arithmetic, loosest level first: + -, then ~, then * / // %, then **; each left-associative.
  ExprPtr parse_arithmetic(size_t level = 0) {
    struct Level {
      std::vector<std::pair<std::string_view, BinaryOp>> ops;
    };
    static const Level kLevels[] = {
        {{{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}}},
        {{{"~", BinaryOp::kConcat}}},
        {{{"*", BinaryOp::kMul}, {"/", BinaryOp::kDiv}, {"//", BinaryOp::kFloorDiv}, {"%", BinaryOp::kMod}}},
        {{{"**", BinaryOp::kPow}}},
    };
    auto operand = [&] { return level + 1 < std::size(kLevels) ? parse_arithmetic(level + 1) : parse_unary(true); };
    ExprPtr e = operand();
    while (true) {
      const auto& ops = kLevels[level].ops;
      const auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& op) { return is_op(op.first); });
      if (it == ops.end()) return e;
      const int line = cur().line;
      next();
      ExprPtr right = operand();
      e = done(std::make_unique<BinaryExpr>(line, it->second, std::move(e), std::move(right)));
    }
  }

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(this);
    const int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const UnaryOp op = is_op("-") ? UnaryOp::kNeg : UnaryOp::kPos;
      next();
      e = done(std::make_unique<UnaryExpr>(line, op, parse_unary(false)));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.kind) {
      case TokenKind::kName: {
        const std::string n = t.text;
        next();
        if (n == "true" || n == "True") return std::make_unique<LiteralExpr>(line, Value(true));
        if (n == "false" || n == "False") return std::make_unique<LiteralExpr>(line, Value(false));
        if (n == "none" || n == "None") return std::make_unique<LiteralExpr>(line, Value(nullptr));
        return std::make_unique<NameExpr>(line, n);
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        return std::make_unique<LiteralExpr>(line, Value(std::move(s)));
      }
      case TokenKind::kInt: {
        const int64_t v = t.int_value;
        next();
        return std::make_unique<LiteralExpr>(line, Value(v));
      }
      case TokenKind::kFloat: {
        const double v = t.float_value;
        next();
        return std::make_unique<LiteralExpr>(line, Value(v));
      }
      case TokenKind::kOp:
        if (skip_op("(")) {
          if (skip_op(")")) return std::make_unique<ListExpr>(line, true);  // ()
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (skip_op("[")) {
          auto list = std::make_unique<ListExpr>(line, false);
          while (!skip_op("]")) {
            list->items.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
          }
          return done(std::move(list));
        }
        if (skip_op("{")) {
          auto dict = std::make_unique<DictExpr>(line);
          while (!skip_op("}")) {
            ExprPtr key = parse_expression();
            expect_op(":");
            dict->items.emplace_back(std::move(key), parse_expression());
            if (!is_op("}")) expect_op(",");
          }
          return done(std::move(dict));
        }
        break;
      default:
        break;
    }
    fail("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (skip_op(".")) {
        if (cur().kind == TokenKind::kInt) {  // x.0 is x[0]
          e = done(
              std::make_unique<GetitemExpr>(line, std::move(e), std::make_unique<LiteralExpr>(line, cur().int_value)));
          next();
        } else {
          std::string name = expect_name("an attribute name after '.'");
          e = done(std::make_unique<GetattrExpr>(line, std::move(e), std::move(name)));
        }
      } else if (skip_op("[")) {
        e = parse_subscript(line, std::move(e));
      } else if (is_op("(")) {
        auto call = std::make_unique<CallExpr>(line, std::move(e));
        parse_args(&call->args);
        e = done(std::move(call));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(int line, ExprPtr object) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (skip_op("]")) return done(std::make_unique<GetitemExpr>(line, std::move(object), std::move(start)));
    }
    auto slice = std::make_unique<SliceExpr>(line, std::move(object));
    slice->start = std::move(start);
    expect_op(":");
    if (!is_op(":") && !is_op("]")) slice->stop = parse_expression();
    if (skip_op(":") && !is_op("]")) slice->step = parse_expression();
    expect_op("]");
    return done(std::move(slice));
  }

  // ( a, b, key=c )
  void parse_args(Args* args) {
    expect_op("(");
    while (!skip_op(")")) {
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        args->keyword.emplace_back(std::move(key), parse_expression());
      } else {
        if (!args->keyword.empty()) throw_syntax_error(cur().line, "positional argument after a keyword argument");
        if (is_op("*") || is_op("**")) throw_syntax_error(cur().line, "*args and **kwargs are not supported");
        args->positional.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  std::string dotted_name(const std::string& what) {
    std::string n = expect_name(what);
    while (is_op(".") && peek().kind == TokenKind::kName) {
      next();
      n += "." + cur().text;
      next();
    }
    return n;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (skip_op("|")) {
        const std::string name = dotted_name("a filter name after '|'");
        auto f = std::make_unique<FilterExpr>(line, std::move(e), name);
        if (is_op("(")) parse_args(&f->args);
        e = done(std::move(f));
      } else if (is_name("is")) {
        next();
        const bool negated = is_name("not");
        if (negated) next();
        const std::string name = dotted_name("a test name after 'is'");
        auto t = std::make_unique<TestExpr>(line, std::move(e), name);
        t->negated = negated;
        if (is_op("(")) {
          parse_args(&t->args);
        } else if ((cur().kind == TokenKind::kName && !is_name("else") && !is_name("or") && !is_name("and")) ||
                   cur().kind == TokenKind::kString || cur().kind == TokenKind::kInt ||
                   cur().kind == TokenKind::kFloat || is_op("[") || is_op("{")) {
          if (is_name("is")) throw_syntax_error(cur().line, "tests cannot be chained with 'is'");
          t->args.positional.push_back(parse_postfix(parse_primary()));  // x is divisibleby 3
        }
        e = done(std::move(t));
      } else if (is_op("(")) {
        auto call = std::make_unique<CallExpr>(line, std::move(e));
        parse_args(&call->args);
        e = done(std::move(call));
      } else {
        return e;
      }
    }
  }

  // Sets a finished node's height from its children; throws past kMaxExprHeight.
  template <typename T>
  std::unique_ptr<T> done(std::unique_ptr<T> e) {
    e->height = children_height(*e) + 1;
    if (e->height > kMaxExprHeight) {
      throw_syntax_error(e->line, str_cat("expression nested deeper than ", kMaxExprHeight, " levels"));
    }
    return e;
  }

  // Counts one level of recursion while alive.
  struct NestingGuard {
    NestingGuard(Parser* p) : parser(p) {
      if (++parser->nesting_ > kMaxNesting) throw_syntax_error(parser->cur().line, "nesting too deep");
    }
    ~NestingGuard() { --parser->nesting_; }
    Parser* parser;
  };

  std::vector<Token> toks_;
  size_t i_ = 0;
  int nesting_ = 0;
  std::vector<Open> open_;
};

}  // namespace

std::shared_ptr<const Template> parse_template(std::string_view source) {
  return Parser(lex_template(source, LexOptions{})).parse();
}

}  // namespace pagoda::jinja
