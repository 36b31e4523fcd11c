"""LLM.embed() on all-MiniLM-L6-v2 (scripts/fetch-models.sh; skipped without it) against
sentence-transformers' reference (tests/model/data/minilm_reference.json), and the errors of mixing
embedding and generative models."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from pagoda import LLM, EmbeddingRequestOutput

CACHE = pathlib.Path(os.environ.get("PAGODA_MODEL_CACHE") or
                     pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "pagoda" / "models")
MINILM = CACHE / "all-MiniLM-L6-v2"
REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "model" / "data" / "minilm_reference.json"
# The bound of tests/model/minilm_test.cc: float32 through another summation order than torch.
TOL = 1e-5


@pytest.fixture(scope="module")
def minilm() -> LLM:
    if not (MINILM / "model.safetensors").is_file():
        pytest.skip(f"skipped: all-MiniLM-L6-v2 is not in {CACHE} (run `bash scripts/fetch-models.sh`)")
    return LLM(str(MINILM))


def test_embed_matches_sentence_transformers(minilm):
    cases = [c for c in json.loads(REFERENCE.read_text())["cases"] if len(c["ids"]) <= 256]
    out = minilm.embed([c["text"] for c in cases])
    assert len(out) == len(cases)
    for o, c in zip(out, cases):
        assert isinstance(o, EmbeddingRequestOutput) and o.finished
        assert o.prompt_token_ids == c["ids"]
        assert o.outputs.hidden_size == 384
        assert max(abs(a - b) for a, b in zip(o.outputs.embedding, c["embedding"])) <= TOL


def test_embed_token_ids_and_single_prompt(minilm):
    c = json.loads(REFERENCE.read_text())["cases"][3]
    by_ids = minilm.embed({"prompt_token_ids": c["ids"]})[0].outputs.embedding
    by_text = minilm.embed(c["text"])[0].outputs.embedding
    assert by_ids == by_text


def test_generate_on_an_embedding_model_fails(minilm):
    with pytest.raises(ValueError, match="use LLM.embed"):
        minilm.generate("hello")


def test_embed_on_a_generative_model_fails(stories):
    with pytest.raises(ValueError, match="needs an embedding model"):
        LLM(stories).embed("hello")


def test_engine_options_reach_the_embedder():
    if not (MINILM / "model.safetensors").is_file():
        pytest.skip(f"skipped: all-MiniLM-L6-v2 is not in {CACHE} (run `bash scripts/fetch-models.sh`)")
    llm = LLM(str(MINILM), max_model_len=16, attention_backend="FLEX_ATTENTION", max_num_seqs=4)
    out = llm.embed(["word " * 100])[0]
    assert len(out.prompt_token_ids) == 16 and out.prompt_token_ids[-1] == 102  # truncated, ends in [SEP]
    with pytest.raises(Exception, match="--kv-cache-dtype fp8"):
        LLM(str(MINILM), kv_cache_dtype="fp8")
    with pytest.raises(Exception, match="--dtype bfloat16"):
        LLM(str(MINILM), dtype="bfloat16")
