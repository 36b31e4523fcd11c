"""The official openai client against `pagoda serve` on stories260K: completions (whole and streamed)
against the golden greedy text, a chat completion's shape, models, and an authentication error.
usage: openai_client_test.py PAGODA_BIN TEST_DATA"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import openai

bin_path, data = sys.argv[1], sys.argv[2]
model_dir = os.path.join(data, "models", "stories260K", "hf")
golden = json.load(open(os.path.join(data, "models", "stories260K", "golden.json")))["greedy"]["text"]

template = tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False)
template.write("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
               "{% if add_generation_prompt %}assistant:{% endif %}")
template.close()
log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
server = subprocess.Popen([bin_path, "serve", model_dir, "--host", "127.0.0.1", "--port", "0", "--api-key", "k",
                           "--served-model-name", "stories", "--chat-template", template.name],
                          stdout=log, stderr=subprocess.STDOUT)
try:
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline and server.poll() is None:
        m = re.search(r"Starting pagoda API server on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            port = int(m.group(1))
        else:
            time.sleep(0.1)
    assert port, "the server did not start:\n" + open(log.name).read()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout=60, max_retries=0)

    assert [m.id for m in client.models.list().data] == ["stories"]

    c = client.completions.create(model="stories", prompt="", max_tokens=64, temperature=0)
    text = c.choices[0].text
    assert len(text) > 100 and golden.startswith(text), repr(text)
    assert c.choices[0].finish_reason == "length"
    assert c.usage.prompt_tokens == 1 and c.usage.completion_tokens == 64 and c.usage.total_tokens == 65, c.usage

    streamed, usage = "", None
    for chunk in client.completions.create(model="stories", prompt="", max_tokens=64, temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.choices:
            streamed += chunk.choices[0].text
        if chunk.usage:
            usage = chunk.usage
    assert streamed == text, (streamed, text)
    assert usage and usage.completion_tokens == 64

    chat = client.chat.completions.create(model="stories", messages=[{"role": "user", "content": "Tell me a story"}],
                                          max_tokens=16, temperature=0)
    assert chat.object == "chat.completion"
    assert chat.choices[0].message.role == "assistant"
    assert isinstance(chat.choices[0].message.content, str) and chat.choices[0].message.content
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage.completion_tokens <= 16

    pieces = [ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model="stories", messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=16, temperature=0,
        stream=True) if ch.choices]
    assert "".join(pieces) == chat.choices[0].message.content

    try:
        client.completions.create(model="nope", prompt="", max_tokens=4)
        raise AssertionError("an unknown model must fail")
    except openai.NotFoundError:
        pass
    try:
        client.completions.create(model="stories", prompt="", max_tokens=4, temperature=-1)
        raise AssertionError("a negative temperature must fail")
    except openai.BadRequestError:
        pass
    try:  # a generative model answers the embeddings API with vLLM's error
        client.embeddings.create(model="stories", input="hello")
        raise AssertionError("embeddings on a generative model must fail")
    except openai.BadRequestError as e:
        assert "The model does not support Embeddings API" in str(e), e
    try:
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
        raise AssertionError("a wrong key must fail")
    except openai.AuthenticationError:
        pass
    print("openai client test: OK")
finally:
    server.send_signal(signal.SIGTERM)
    try:
        rc = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        rc = server.wait()
    os.unlink(template.name)
    out = open(log.name).read()
    os.unlink(log.name)
if rc != 0:
    print(out)
    sys.exit(f"pagoda serve exited with {rc} after SIGTERM")
