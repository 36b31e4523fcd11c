// Renderer of pagoda's Jinja subset: walks a parsed template with a set of global variables, with Jinja2's
// scoping (a for-loop iteration and a macro call have their own scope; `set` in an if body sets the
// enclosing scope; namespace() attributes are shared) and Jinja2's default Undefined, made lenient on
// attribute access: a missing variable renders as "" and is falsy, iterating it gives nothing, x.y of an
// undefined x is undefined; arithmetic on it, calling it or tojson of it fails.
//
// Globals always present: namespace(), range(), dict(), raise_exception(msg) (throws pagoda::Error with
// msg as its message) and strftime_now(format) (local time). `loop` in a for body has index, index0,
// revindex, revindex0, first, last, length, previtem, nextitem, depth, depth0 and cycle(...).
#pragma once

#include <string>

#include "pagoda/jinja/ast.h"
#include "pagoda/jinja/render_limits.h"

namespace pagoda::jinja {

// Throws pagoda::Error (kRuntime) "chat template line N: ..." when rendering fails or passes one of `limits`
// (the input depth is the caller's to check, in Value::from_json), "chat template: rendering cancelled" or
// "... time limit ..." when stopped, or raise_exception's message unchanged.
std::string render_template(const Template& t, const Dict& globals, const RenderLimits& limits = {});

}  // namespace pagoda::jinja
