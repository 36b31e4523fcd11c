#!/usr/bin/env python3
"""Checks every #include "pagoda/..." under src/pagoda against the layer graph of the source folders.

The graph is written down here, once; docs/architecture.md is its prose version. Dependencies point down:

    core <- platform, config <- ops, attention, tokenizer, jinja <- model, hub, kv_cache <- scheduler
         <- engine <- server, cli <- python

A file's folder is the first path component under src/pagoda (model/cuda/ is model, attention/flash_attn/
is attention). A folder may include its own folder and any folder of a lower layer (what its layer reaches
transitively). Folders of one layer do not include each other, except along the edges in SAME_LAYER, each
with its reason; FORBIDDEN closes edges the layers would allow. A folder missing from LAYERS is an error,
so a new folder is placed in the graph when it is created.

Usage: check_include_graph.py [ROOT]   (ROOT: the src/pagoda folder; default: the one of this repository)
Prints one line per wrong-way include, "FILE:LINE: wrong-way include "pagoda/...": FROM -> TO (why)",
and exits 1 when there is any.
"""
import pathlib
import re
import sys

LAYERS = [
    ["core"],
    ["platform", "config"],
    ["ops", "attention", "tokenizer", "jinja"],
    ["model", "hub", "kv_cache"],
    ["scheduler"],
    ["engine"],
    ["server", "cli"],
    ["python"],
]

# (from, to) -> why: includes between folders of the same layer that are allowed.
SAME_LAYER = {
    ("tokenizer", "jinja"): "chat templates (tokenizer/chat_template.cc) render with the Jinja engine",
    ("cli", "server"): "`pagoda serve` (cli/serve_cmd.cc) starts the OpenAI-compatible server",
}

# (from, to) -> why: edges the layers allow but that stay closed.
FORBIDDEN = {
    ("server", "attention"): "the server learns about attention (the backend's name) through the engine",
}

EXTENSIONS = {".h", ".cc", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](pagoda/[^">]+)[">]')

LAYER_OF = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def why_not(src, dst):
    """Why folder `src` may not include folder `dst` ("" when it may)."""
    if src == dst:
        return ""
    if dst not in LAYER_OF:
        return f"{dst} is not in the layer graph (add it to LAYERS in {pathlib.Path(__file__).name})"
    if (src, dst) in FORBIDDEN:
        return FORBIDDEN[(src, dst)]
    if LAYER_OF[dst] < LAYER_OF[src]:
        return ""
    if LAYER_OF[dst] == LAYER_OF[src]:
        if (src, dst) in SAME_LAYER:
            return ""
        return f"{src} and {dst} are in the same layer and no edge {src} -> {dst} is listed in SAME_LAYER"
    return f"{dst} is in a higher layer than {src}"


def check(root):
    """Returns (problems, number of includes checked)."""
    problems, checked = [], 0
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in EXTENSIONS)
    for path in files:
        rel = path.relative_to(root)
        if len(rel.parts) < 2:
            problems.append(f"{path}: a source file outside the folders of the layer graph")
            continue
        src = rel.parts[0]
        if src not in LAYER_OF:
            problems.append(f"{path}: folder {src} is not in the layer graph (add it to LAYERS)")
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            target = m.group(1)
            parts = target.split("/")
            if len(parts) < 3:
                problems.append(f'{path}:{lineno}: include "{target}" names no folder under pagoda/')
                continue
            dst = parts[1]
            why = why_not(src, dst)
            if why:
                problems.append(f'{path}:{lineno}: wrong-way include "{target}": {src} -> {dst} ({why})')
    return problems, checked


def main(argv):
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2] / "src" / "pagoda"
    if not root.is_dir():
        print(f"no such folder: {root}", file=sys.stderr)
        return 2
    problems, checked = check(root)
    for p in problems:
        print(p)
    if checked == 0:
        print(f"no #include \"pagoda/...\" found under {root}: wrong folder?")
        return 1
    if problems:
        print(f"{len(problems)} include(s) against the layer graph, of {checked} checked under {root}")
        return 1
    print(f"{checked} includes under {root} follow the layer graph")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
