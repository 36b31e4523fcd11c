"""The built-in model's tokenizer: pagoda's tokenizer from SmolLM2-135M-Instruct.Q4_1.gguf's tokenizer.ggml.*
metadata against a reference built with Hugging Face's `tokenizers` from the same file's vocabulary and
merges and SmolLM2's own tokenizer.json pipeline, on llama.cpp's tokenizer test strings and on chat
renderings.

SmolLM2's tokenizer.json (HuggingFaceTB/SmolLM2-135M and -Instruct share it): no normalizer, pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, trim_offsets=True,
use_regex=True)], BPE without byte fallback or ignore_merges, ByteLevel decoder, and its 17 added tokens
special. llama.cpp's "smollm" pre-tokenizer (the file's tokenizer.ggml.pre) splits the same way: every
digit alone, then the GPT-2 regex. The file's metadata is read with gguf-py.
"""

from __future__ import annotations

import json
import os
import pathlib

import gguf
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from pagoda import _core

from conftest import DATA


def smollm2_path() -> pathlib.Path:
    try:
        return pathlib.Path(_core.builtin_model_file("smollm2:135m"))
    except ValueError as e:  # not fetched: scripts/fetch-models.sh (install-deps runs it)
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def vocab() -> dict:
    """The tokenizer keys of the file, as gguf-py reads them."""
    reader = gguf.GGUFReader(smollm2_path())

    def get(key, default=None):
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    return {
        "model": get("tokenizer.ggml.model"),
        "pre": get("tokenizer.ggml.pre", ""),
        "tokens": get("tokenizer.ggml.tokens"),
        "token_types": get("tokenizer.ggml.token_type", []),
        "merges": get("tokenizer.ggml.merges", []),
        "bos_id": get("tokenizer.ggml.bos_token_id"),
        "eos_id": get("tokenizer.ggml.eos_token_id"),
        "unk_id": get("tokenizer.ggml.unknown_token_id"),
        "pad_id": get("tokenizer.ggml.padding_token_id"),
        "add_bos": get("tokenizer.ggml.add_bos_token"),
        "add_space_prefix": get("tokenizer.ggml.add_space_prefix"),
        "chat_template": get("tokenizer.chat_template", ""),
    }


@pytest.fixture(scope="module")
def pagoda_tokenizer():
    return _core.tokenizer_from_gguf(str(smollm2_path()))


@pytest.fixture(scope="module")
def reference(vocab):
    tokens = vocab["tokens"]
    # A merge "a b" splits at its first space after the first character, as llama.cpp reads it.
    merges = [(m[:m.index(" ", 1)], m[m.index(" ", 1) + 1:]) for m in vocab["merges"]]
    ref = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    ref.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    ref.decoder = decoders.ByteLevel()
    ref.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, vocab["token_types"]) if kind == 3])
    return ref


def test_the_file_is_what_the_reference_assumes(vocab):
    assert vocab["model"] == "gpt2" and vocab["pre"] == "smollm"
    assert len(vocab["tokens"]) == 49152 and len(vocab["merges"]) == 48900
    assert vocab["tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert [i for i, kind in enumerate(vocab["token_types"]) if kind != 1] == list(range(17))
    assert (vocab["bos_id"], vocab["eos_id"], vocab["add_bos"]) == (1, 2, False)


def llama_cpp_strings() -> list[str]:
    """llama.cpp's tokenizer test strings (test-tokenizer-0): 47, the last one empty."""
    text = (DATA / "tokenizers" / "vectors" / "ggml-vocab-gpt-2.gguf.inp").read_text(encoding="utf-8")
    strings = text.split("\n__ggml_vocab_test__\n")
    assert len(strings) == 47
    return strings


# More of what a chat model sees: numbers, code, markup, the special tokens written in text.
EXTRA_STRINGS = [
    "What is 2+2? It's 4. In 2024, 1,234,567.89 people paid $3.50 (or €3,20).",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|im_end|>x<|im_start|><repo_name>",
    "The year ２０２４ (full-width), ½ and ² and Ⅻ are numbers too.",
    "Ünïcödé, 日本語のテキスト, Русский текст, 🦙🚀 emoji.",
    "   leading spaces\t\ttabs\r\nand trailing   ",
]


@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_encode_matches_the_reference(pagoda_tokenizer, reference, add_special_tokens):
    strings = llama_cpp_strings() + EXTRA_STRINGS
    mismatches = []
    for text in strings:
        want = reference.encode(text, add_special_tokens=add_special_tokens).ids  # no post-processor, add_bos false
        got = pagoda_tokenizer.encode(text, add_special_tokens)
        if got != want:
            mismatches.append((text, got, want))
    assert not mismatches, f"{len(mismatches)}/{len(strings)} differ, first: {mismatches[0]!r}"


def test_decode_matches_the_reference(pagoda_tokenizer, reference):
    for text in llama_cpp_strings() + EXTRA_STRINGS:
        ids = reference.encode(text, add_special_tokens=False).ids
        for skip in (False, True):
            assert pagoda_tokenizer.decode(ids, skip) == reference.decode(ids, skip_special_tokens=skip), text
        assert pagoda_tokenizer.decode(ids, False) == text


def test_special_tokens(pagoda_tokenizer, vocab):
    assert pagoda_tokenizer.vocab_size == 49152
    assert pagoda_tokenizer.bos_id == 1 and pagoda_tokenizer.bos_token == "<|im_start|>"
    # <|im_end|> ends a turn; <|endoftext|> ends generation too, as in llama.cpp.
    assert pagoda_tokenizer.eos_ids == [2, 0] and pagoda_tokenizer.eos_token == "<|im_end|>"
    assert [i for i in range(49152) if pagoda_tokenizer.is_special(i)] == list(range(17))
    assert pagoda_tokenizer.chat_template == vocab["chat_template"]


SYSTEM_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CONVERSATIONS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "system", "content": "You answer in one word."},
      {"role": "user", "content": "Name a color of the sky."}], True),
    ([{"role": "user", "content": "Count to 5."},
      {"role": "assistant", "content": "1, 2, 3, 4, 5."},
      {"role": "user", "content": "Now backwards, please: 54321?"}], True),
    ([{"role": "user", "content": "Write `print('hi')` in Python.\n\nThanks!"},
      {"role": "assistant", "content": "```python\nprint('hi')\n```"}], False),
]


def chatml(messages, add_generation_prompt: bool) -> str:
    """SmolLM2's template (ChatML, a default system message when the first message is not one), written
    out by hand."""
    text = ""
    if messages[0]["role"] != "system":
        text += f"<|im_start|>system\n{SYSTEM_DEFAULT}<|im_end|>\n"
    for m in messages:
        text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
def test_chat_renderings_encode_as_the_reference(pagoda_tokenizer, reference, conversation):
    messages, add_generation_prompt = CONVERSATIONS[conversation]
    rendered = pagoda_tokenizer.render_chat("", json.dumps(messages), "null", add_generation_prompt, "{}")
    assert rendered == chatml(messages, add_generation_prompt)
    ids = pagoda_tokenizer.encode(rendered, False)
    assert ids == reference.encode(rendered, add_special_tokens=False).ids
    assert ids[0] == 1 and ids.count(1) == len(messages) + (messages[0]["role"] != "system") + add_generation_prompt
