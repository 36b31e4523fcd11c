"""What a Python user expects of a native engine: the GIL released while it runs, Ctrl-C stopping a batch,
a progress bar, log lines through `logging`, no growth over repeated LLM lifetimes, the `pagoda` command
installed, and stubs that match the module."""

from __future__ import annotations

import ast
import gc
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import pagoda
from pagoda import LLM, SamplingParams, _core

from conftest import run_cli, run_python

LONG = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)


def spin(seconds: float) -> int:
    """Pure-Python work: how many loop iterations fit in `seconds` of wall time."""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    return n


def test_gil_is_released_while_generating():
    llm = LLM(model="dummy:tiny")
    inside = threading.Event()

    class Bar:  # the progress bar is first drawn from inside the engine's batch loop
        def __init__(self, **kwargs):
            inside.set()

        def update(self, n):
            pass

        def set_postfix_str(self, s, refresh=True):
            pass

        def close(self):
            pass

    worker = threading.Thread(target=lambda: llm.generate(
        ["Once upon a time"] * 4, SamplingParams(temperature=0, max_tokens=600, ignore_eos=True), use_tqdm=Bar))
    alone = spin(0.3)
    worker.start()
    assert inside.wait(60)
    beside = spin(0.3)
    still_running = worker.is_alive()
    worker.join()
    assert still_running, "the batch ended before the measurement did"
    # Holding the GIL for the batch would stop this thread; released, it keeps most of its pace.
    assert beside > 0.3 * alone, (beside, alone)


def test_two_threads_share_one_llm():
    llm = LLM(model="dummy:tiny")
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    want = llm.generate("abc", params, use_tqdm=False)[0].outputs[0].token_ids
    results = []
    threads = [threading.Thread(target=lambda: results.append(llm.generate("abc", params, use_tqdm=False)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0].outputs[0].token_ids for r in results] == [want] * 4


INTERRUPT_SCRIPT = r"""
import signal, sys, time
# As in a terminal: a process started in the background by a shell inherits SIGINT ignored, and Python then
# installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
from pagoda import LLM, SamplingParams
llm = LLM(model="dummy:tiny")
print("READY", flush=True)
start = time.monotonic()
try:
    llm.generate(["Once upon a time"] * 64, SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True),
                 use_tqdm=False)
    print("FINISHED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED %.2f" % (time.monotonic() - start), flush=True)
    out = llm.generate("abc", SamplingParams(temperature=0, max_tokens=5, ignore_eos=True), use_tqdm=False)
    print("AGAIN", len(out[0].outputs[0].token_ids), flush=True)
"""


def test_ctrl_c_interrupts_generate():
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPT_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(1.0)  # inside generate, which runs for a minute or more
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    latency = time.monotonic() - sent
    assert "INTERRUPTED" in out, out + err
    assert "AGAIN 5" in out, out + err  # the engine is idle and usable after the interrupted batch
    assert latency < 5, latency


def test_progress_bar_tqdm(capsys, stories):
    pytest.importorskip("tqdm")
    llm = LLM(model=stories)
    llm.generate(["a", "b", "c"], SamplingParams(max_tokens=4), use_tqdm=True)
    err = capsys.readouterr().err
    assert "Processed prompts" in err and "3/3" in err and "toks/s" in err
    llm.generate(["a", "b", "c"], SamplingParams(max_tokens=4), use_tqdm=False)
    assert "Processed prompts" not in capsys.readouterr().err


def test_progress_bar_without_tqdm(capsys, stories, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    llm = LLM(model=stories)
    llm.generate(["a", "b", "c", "d"], SamplingParams(max_tokens=4), use_tqdm=True)
    err = capsys.readouterr().err
    assert "Processed prompts: 100%" in err and "4/4" in err


def test_progress_bar_factory(stories):
    calls = []

    class Bar:
        def __init__(self, **kwargs):
            calls.append(("init", kwargs["total"]))

        def update(self, n):
            calls.append(("update", n))

        def set_postfix_str(self, s, refresh=True):
            pass

        def close(self):
            calls.append(("close",))

    LLM(model=stories).generate(["a", "b"], SamplingParams(max_tokens=2), use_tqdm=Bar)
    assert calls[0] == ("init", 2) and calls[-1] == ("close",)
    assert sum(c[1] for c in calls if c[0] == "update") == 2


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_startup_lines_go_through_logging(stories, pagoda_bin):
    handler = Records()
    log = logging.getLogger("pagoda")
    log.addHandler(handler)
    try:
        LLM(model=stories, device="cpu")
        messages = [r.getMessage() for r in handler.records]
        select = next(r for r in handler.records if r.getMessage().startswith("Using CPU_ATTN attention backend"))
        assert select.levelname == "INFO" and select.name == "pagoda" and select.filename.endswith(".cc")
        # The lines `pagoda generate` prints for the same engine, in the same order.
        r = run_cli(pagoda_bin, "generate", "--model", stories, "--device", "cpu", "--max-tokens", "1")
        cli = [line.split("] ", 1)[1] for line in r.stderr.splitlines() if line.startswith(("INFO ", "WARNING "))]
        startup = [m for m in cli if not m.startswith("Prompt tokens:")]
        assert messages == startup
        handler.records.clear()
        log.setLevel(logging.WARNING)
        LLM(model=stories, device="cpu")
        assert handler.records == []
    finally:
        log.removeHandler(handler)
        log.setLevel(logging.INFO)


def test_log_levels_and_format(stories):
    warning = "CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized."
    code = (f"import logging\nfrom pagoda import LLM\nLLM(model={stories!r}, device='cpu', block_size=48{{}})\n"
            "print(logging.getLogger('pagoda').getEffectiveLevel())\n")
    r = run_python(code.format(", log_level='DEBUG'"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "10"
    lines = r.stderr.splitlines()
    assert any(re.fullmatch(r"INFO \d\d-\d\d \d\d:\d\d:\d\d \[model_setup\.cc:\d+\] Initializing engine: .*", l)
               for l in lines), lines
    assert any(re.fullmatch(r"WARNING .* \[startup\.cc:\d+\] " + re.escape(warning), l) for l in lines), lines
    env = {**os.environ, "PAGODA_LOGGING_LEVEL": "WARNING"}
    r = run_python(code.format(""), env=env)
    assert r.returncode == 0 and warning in r.stderr and "Initializing engine" not in r.stderr, r.stderr
    r = run_python(code.format(", log_level='INFO'"), env=env)  # LLM(log_level=...) wins, as --log-level does
    assert "Initializing engine" in r.stderr
    r = run_python(code.format(""), env={**os.environ, "PAGODA_LOGGING_LEVEL": "ERROR"})
    assert r.returncode == 0 and r.stderr == "", r.stderr


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# What 20 lifetimes may add to the resident set: allocator caches and Python's free lists. One lifetime's
# engine is far larger (dummy:tiny's float32 weights alone are about 10 MiB), so leaking any of it fails.
RSS_BOUND = 8 << 20


@pytest.mark.parametrize("model", ["dummy:tiny", "stories"])
def test_create_and_destroy_twenty_times(model, stories):
    def lifetime():
        llm = LLM(model=stories if model == "stories" else model, kv_cache_space=0.05)
        out = llm.generate(["Once upon a time", "Lily", "The"],
                           SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 32
        del llm, out
        gc.collect()

    for _ in range(3):  # warm up: first-use allocations, imports, caches
        lifetime()
    before = rss_bytes()
    for _ in range(20):
        lifetime()
    grown = rss_bytes() - before
    print(f"{model}: RSS grew by {grown / 2**20:.2f} MiB over 20 LLM lifetimes (bound {RSS_BOUND >> 20} MiB)")
    assert grown < RSS_BOUND


def test_pagoda_command_is_installed(pagoda_bin):
    r = run_cli(pagoda_bin, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"pagoda {pagoda.__version__}"
    r = run_cli(pagoda_bin, "backends", "list", "--json")
    assert r.returncode == 0


def stub_names(path: pathlib.Path) -> dict:
    """{name: set of member names} for the classes of a .pyi, and None for its functions."""
    tree = ast.parse(path.read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    members.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    members.update(t.id for t in item.targets)
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = None
    return names


def test_stubs_match_the_module():
    stubs = stub_names(pathlib.Path(_core.__file__).with_name("_core.pyi"))
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert set(stubs) == public
    for name, members in stubs.items():
        if members is None:
            continue
        actual = {m for m in dir(getattr(_core, name)) if not m.startswith("_")}
        assert members - {"__init__"} == actual, name
    registry = pathlib.Path(pagoda.__file__).parent / "v1" / "attention" / "backends" / "registry.pyi"
    assert stub_names(registry)["AttentionBackendEnum"] - {"get_path"} == set(_core.backend_names())
    assert (pathlib.Path(pagoda.__file__).parent / "py.typed").is_file()
