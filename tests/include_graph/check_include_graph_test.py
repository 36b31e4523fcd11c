#!/usr/bin/env python3
"""Self-test of check_include_graph.py: runs it over small fixture trees and checks that it fails on
wrong-way includes, naming file, line and edge, and passes a tree whose includes follow the graph."""
import pathlib
import subprocess
import sys
import tempfile

CHECKER = pathlib.Path(__file__).with_name("check_include_graph.py")

# Includes the graph allows: own folder, a lower layer, a listed same-layer edge, a CUDA file in a subfolder.
GOOD = {
    "core/dtype.h": '#pragma once\n#include <cstdint>\n#include "pagoda/core/logging.h"\n',
    "engine/engine.cc": '#include "pagoda/engine/engine.h"\n\n#include "pagoda/scheduler/scheduler.h"\n'
                        '#include "pagoda/core/error.h"\n',
    "tokenizer/chat_template.cc": '#include "pagoda/jinja/parser.h"\n',
    "model/cuda/runner.cu": '#include "pagoda/attention/backend.h"\n#include "pagoda/ops/cuda/gemm.h"\n',
}

# (file, text, the line the checker must print).
BAD = [
    ("core/bad.h", '#pragma once\n\n#include "pagoda/engine/engine.h"\n',
     'core/bad.h:3: wrong-way include "pagoda/engine/engine.h": core -> engine'),
    ("hub/hub.cc", '#include "pagoda/hub/hub.h"\n#include "pagoda/model/model_config.h"\n',
     'hub/hub.cc:2: wrong-way include "pagoda/model/model_config.h": hub -> model'),
    ("jinja/eval.h", '#  include "pagoda/tokenizer/chat_template.h"\n',
     'jinja/eval.h:1: wrong-way include "pagoda/tokenizer/chat_template.h": jinja -> tokenizer'),
    ("server/api_server.cc", '// x\n#include "pagoda/attention/selector.h"\n',
     'server/api_server.cc:2: wrong-way include "pagoda/attention/selector.h": server -> attention'),
    ("ops/cuda/k.cuh", '#include "pagoda/widgets/w.h"\n',
     'ops/cuda/k.cuh:1: wrong-way include "pagoda/widgets/w.h": ops -> widgets'),
]


def write_tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run(root):
    r = subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        good = pathlib.Path(tmp) / "good" / "src" / "pagoda"
        write_tree(good, GOOD)
        rc, out = run(good)
        n = sum(text.count('#include "pagoda/') for text in GOOD.values())
        if rc != 0 or f"{n} includes" not in out:
            failures.append(f"a tree that follows the graph: exit {rc}, expected 0 and {n} includes checked:\n{out}")

        bad = pathlib.Path(tmp) / "bad" / "src" / "pagoda"
        write_tree(bad, GOOD)
        write_tree(bad, {rel: text for rel, text, _ in BAD})
        write_tree(bad, {"widgets/w.h": "#pragma once\n"})  # a folder the graph does not place
        rc, out = run(bad)
        if rc != 1:
            failures.append(f"a tree with wrong-way includes: exit {rc}, expected 1:\n{out}")
        lines = out.splitlines()
        for _, _, expected in BAD:
            if not any(expected in line for line in lines):
                failures.append(f"missing from the output: {expected}\n{out}")
        if not any("widgets/w.h: folder widgets is not in the layer graph" in line for line in lines):
            failures.append(f"a source folder outside the graph was not reported:\n{out}")
        reported = [line for line in lines if "wrong-way include" in line]
        if len(reported) != len(BAD):
            failures.append(f"{len(reported)} wrong-way includes reported, expected {len(BAD)}:\n{out}")

        empty = pathlib.Path(tmp) / "empty"
        empty.mkdir()
        rc, out = run(empty)
        if rc == 0:
            failures.append(f"a tree with no includes passed (a wrong root must not pass):\n{out}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: {len(BAD)} wrong-way includes found, the good tree passes")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
