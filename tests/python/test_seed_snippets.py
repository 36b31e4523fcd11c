"""The Python snippets of the second seed document ("How to configure attention backends"), run as they are
written with `vllm` replaced by `pagoda` and the hub model names by a local model, each in a fresh
interpreter, as a user's script."""

from __future__ import annotations

import re

import pytest

from conftest import DATA, run_python

SEED = DATA / "seeds" / "002_48638e5e59d8d1dc.txt"


def python_snippets() -> list[str]:
    """Each snippet: from a `from vllm import LLM` line to the `)` that closes its `llm = LLM(` call."""
    lines = SEED.read_text().splitlines()
    snippets, i = [], 0
    while i < len(lines):
        if lines[i].startswith("from vllm import LLM"):
            j = i
            while not (lines[j] == ")" and any(l.startswith("llm = LLM(") for l in lines[i:j])):
                j += 1
            snippets.append("\n".join(lines[i:j + 1]))
            i = j
        i += 1
    return snippets


def test_the_seed_has_two_snippets():
    snippets = python_snippets()
    assert len(snippets) == 2
    assert "AttentionConfig(" in snippets[0] and 'attention_backend="FLASHINFER"' in snippets[1]


@pytest.mark.parametrize("index", [0, 1])
def test_seed_snippet_runs_with_pagoda(index, stories):
    snippet = python_snippets()[index]
    code = re.sub(r"\bvllm\b", "pagoda", snippet)
    code = re.sub(r'model="[^"]*"', f"model={stories!r}", code)
    assert "vllm" not in code and stories in code
    # The snippet only builds the LLM; prove the LLM it built generates.
    code += ("\nfrom pagoda import SamplingParams\n"
             "out = llm.generate('Once upon a time', SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)\n"
             "print('GENERATED', repr(out[0].outputs[0].text), llm.attention_backends)\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "GENERATED" in r.stdout
    forced = "FLASH_ATTN" if index == 0 else "FLASHINFER"
    if "'CPU_ATTN'" in r.stdout:  # on the CPU the forced CUDA backend is reported and CPU_ATTN runs (spec §5.4)
        assert f"Cannot use {forced} backend on CPU." in r.stderr
        assert "Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN']." in r.stderr
    elif f"Using {forced} attention backend out of potential backends: ['{forced}']." in r.stderr:
        # pagoda's addition (docs/architecture.md): a forced FLASHINFER runs its CPU runner on the CPU
        assert forced == "FLASHINFER" and "Cannot use" not in r.stderr
    else:
        assert f"Using {forced} backend." in r.stderr
