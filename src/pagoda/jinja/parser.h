// Parser of pagoda's Jinja subset: tokens -> syntax tree, with Jinja2's operator precedence (filters and
// tests bind tighter than arithmetic: `xs|length - 1` is (xs|length) - 1).
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples, namespace
// attributes, block form), macro, break/continue, and Hugging Face's generation block (rendered as its
// body). Other tags (include, import, extends, block, call, filter, with, do) are rejected.
#pragma once

#include <memory>
#include <string_view>

#include "pagoda/jinja/ast.h"

namespace pagoda::jinja {

// Throws pagoda::Error (kConfig) "chat template line N: expected ..., found ..." on a syntax error or an
// unclosed block. An unknown filter or test is an error only when rendering reaches it (as in Jinja2 3.x
// inside conditional blocks), so a template that names one in a branch it rarely takes still works.
std::shared_ptr<const Template> parse_template(std::string_view source);

}  // namespace pagoda::jinja
