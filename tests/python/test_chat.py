"""LLM.chat() renders through the model's chat template exactly as `pagoda serve`'s /v1/chat/completions
does: same prompt tokens, same greedy completion."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import time
import urllib.request

import pytest

from pagoda import LLM, SamplingParams

from conftest import STORIES_HF

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
CONVERSATIONS = [
    [{"role": "user", "content": "Tell me a story about a cat."}],
    [{"role": "system", "content": "You tell short stories."},
     {"role": "user", "content": "Once upon a time"},
     {"role": "assistant", "content": "there was a dog."},
     {"role": "user", "content": "What happened next?"}],
]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory, data_dir) -> str:
    """stories260K with a chat template in its tokenizer_config.json (the model files linked, not copied)."""
    d = tmp_path_factory.mktemp("stories-chat")
    for f in STORIES_HF.iterdir():
        if f.name != "tokenizer_config.json":
            (d / f.name).symlink_to(f)
    config = json.loads((STORIES_HF / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return str(d)


@pytest.fixture(scope="module")
def server(chat_model, pagoda_bin, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([pagoda_bin, "serve", chat_model, "--host", "127.0.0.1", "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        port = None
        while port is None and time.time() < deadline and proc.poll() is None:
            m = re.search(r"Starting pagoda API server on http://127\.0\.0\.1:(\d+)", log.read_text())
            port = int(m.group(1)) if m else time.sleep(0.1)
        assert port, "the server did not start:\n" + log.read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def server_chat(url: str, model: str, messages, max_tokens: int) -> dict:
    body = json.dumps({"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_chat_equals_server(chat_model, server):
    llm = LLM(model=chat_model)
    outs = llm.chat(CONVERSATIONS, SamplingParams(temperature=0, max_tokens=40), use_tqdm=False)
    assert len(outs) == len(CONVERSATIONS)
    for conversation, out in zip(CONVERSATIONS, outs):
        ref = server_chat(server, chat_model, conversation, 40)
        assert out.outputs[0].text == ref["choices"][0]["message"]["content"]
        assert out.outputs[0].finish_reason == ref["choices"][0]["finish_reason"]
        assert len(out.prompt_token_ids) == ref["usage"]["prompt_tokens"]
        assert len(out.outputs[0].token_ids) == ref["usage"]["completion_tokens"]
    # One conversation alone gives the same as in the batch.
    (single,) = llm.chat(CONVERSATIONS[1], SamplingParams(temperature=0, max_tokens=40), use_tqdm=False)
    assert single.outputs[0].token_ids == outs[1].outputs[0].token_ids


def test_chat_prompt_is_the_rendered_template(chat_model):
    llm = LLM(model=chat_model)
    (out,) = llm.chat(CONVERSATIONS[0], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    want = "<s>user: Tell me a story about a cat.\nassistant:"
    assert out.prompt == want
    tok = llm.get_tokenizer()
    assert tok.apply_chat_template(CONVERSATIONS[0], add_generation_prompt=True, tokenize=False) == want
    assert tok.apply_chat_template(CONVERSATIONS[0], add_generation_prompt=True) == out.prompt_token_ids
    # The template writes BOS itself: the rendering is encoded without adding special tokens.
    assert out.prompt_token_ids.count(tok.bos_token_id) == 1
    assert tok.chat_template == TEMPLATE


def test_chat_options(chat_model, stories):
    llm = LLM(model=chat_model)
    other = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    (out,) = llm.chat(CONVERSATIONS[0], SamplingParams(max_tokens=1), chat_template=other, use_tqdm=False)
    assert out.prompt == "[Tell me a story about a cat.]"
    (out,) = llm.chat(CONVERSATIONS[1], SamplingParams(max_tokens=1), add_generation_prompt=False, use_tqdm=False)
    assert out.prompt.endswith("user: What happened next?\n")
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once upon a"}]
    (out,) = llm.chat(msgs, SamplingParams(max_tokens=1), add_generation_prompt=False, continue_final_message=True,
                      use_tqdm=False)
    assert out.prompt.endswith("assistant: Once upon a")
    with pytest.raises(ValueError, match="continue_final_message"):
        llm.chat(msgs, continue_final_message=True, use_tqdm=False)
    # A model without a chat template: the engine's config error.
    with pytest.raises(ValueError, match="chat template"):
        LLM(model=stories).chat(CONVERSATIONS[0], use_tqdm=False)


def test_content_format(chat_model):
    """chat_template_content_format: "string" joins text parts into the string the template prints; "openai"
    hands a string content to the template as one text part; an unknown format is refused."""
    llm = LLM(model=chat_model)
    params = SamplingParams(temperature=0, max_tokens=4)
    plain = [{"role": "user", "content": "Once upon a time\nthere was a cat."}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Once upon a time"},
                                          {"type": "text", "text": "there was a cat."}]}]
    want = llm.chat(plain, params)[0]
    got = llm.chat(parts, params, chat_template_content_format="string")[0]
    assert got.prompt_token_ids == want.prompt_token_ids
    assert got.outputs[0].token_ids == want.outputs[0].token_ids
    as_parts = llm.chat(plain, params, chat_template="{{ messages[0]['content'][0]['text'] }}",
                        chat_template_content_format="openai")[0]
    as_text = llm.chat(plain, params, chat_template="{{ messages[0]['content'] }}")[0]
    assert as_parts.prompt_token_ids == as_text.prompt_token_ids
    with pytest.raises(ValueError, match="chat_template_content_format"):
        llm.chat(plain, params, chat_template_content_format="xml")
