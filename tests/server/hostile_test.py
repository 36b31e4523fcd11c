#!/usr/bin/env python3
"""The hostile-input suite: `pagoda serve` on 127.0.0.1 against what an attacker sends.

Each case attacks one defect class with several variants; after every case the server must still be
alive and answer a normal greedy request with the same text as before the first case. Every loop is
bounded in count and time, and all traffic goes to 127.0.0.1.

usage: hostile_test.py PAGODA_BIN TEST_DATA
Prints one line per case and ends with "N passed, N failed".
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN, DATA = sys.argv[1], os.environ.get("PAGODA_TEST_DATA") or sys.argv[2]
MODEL = os.path.join(DATA, "models", "stories260K", "hf")
INT64_MIN = -(2**63)

# A chat template whose variables come from the request's chat_template_kwargs, so that a request can
# drive integer arithmetic, loops and repetition inside the renderer.
TEMPLATE = (
    "{%- if a is defined %}{{ a // b }} {{ a % b }}{% endif -%}"
    "{%- if loops is defined %}{% for i in range(loops) %}x{% endfor %}{% endif -%}"
    "{%- if rep is defined %}{{ 'xy' * rep }}{% endif -%}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class Server:
    """`pagoda serve` as a subprocess; the port comes from its startup line."""

    def __init__(self, *extra, port=0):
        fd, self.template = tempfile.mkstemp(suffix=".jinja")
        os.write(fd, TEMPLATE.encode())
        os.close(fd)
        self.log = tempfile.NamedTemporaryFile(prefix="pagoda_hostile_", suffix=".log", delete=False)
        args = [BIN, "serve", MODEL, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "stories",
                "--chat-template", self.template, *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.port = 0
        deadline = time.time() + 60
        while time.time() < deadline and self.port == 0 and self.proc.poll() is None:
            m = re.search(r"Starting pagoda API server on http://127\.0\.0\.1:(\d+)", self.output())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.template)
        os.unlink(self.log.name)


def read_response(sock, deadline):
    """One HTTP/1.1 response from `sock`: (status, headers, body bytes). Handles chunked bodies."""
    buf = b""

    def need(pred):
        nonlocal buf
        while not pred():
            sock.settimeout(max(0.01, deadline - time.time()))
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed early")
            buf += chunk

    need(lambda: b"\r\n\r\n" in buf)
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if status == 100:
        return read_response_rest(sock, buf, deadline)
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            need(lambda: b"\r\n" in buf)
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line, 16)
            need(lambda: len(buf) >= size + 2)
            body, buf = body + buf[:size], buf[size + 2:]
            if size == 0:
                break
        return status, headers, body, buf
    n = int(headers.get("content-length", "0"))
    need(lambda: len(buf) >= n)
    return status, headers, buf[:n], buf[n:]


def read_response_rest(sock, buf, deadline):
    # After a 100 Continue: the final response follows (the test sends the body first).
    class Prefixed:
        def __init__(self):
            self.pending = buf

        def recv(self, n):
            if self.pending:
                out, self.pending = self.pending, b""
                return out
            return sock.recv(n)

        def settimeout(self, t):
            sock.settimeout(t)

    return read_response(Prefixed(), deadline)


def request(port, method, path, body=None, headers=None, timeout=30.0):
    """One request on a fresh connection: (status, headers, body bytes)."""
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    hdrs = {"Host": "127.0.0.1", "Connection": "close", "Content-Type": "application/json",
            "Content-Length": str(len(data))}
    hdrs.update(headers or {})
    raw = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw.encode() + data)
        status, h, b, _ = read_response(s, time.time() + timeout)
        return status, h, b


def post(port, path, body, timeout=30.0, headers=None):
    status, _, b = request(port, "POST", path, body, headers=headers, timeout=timeout)
    try:
        return status, json.loads(b) if b.strip() else None
    except ValueError:
        return status, b


def sse(body):
    events = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[6:]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


GREEDY = {"model": "stories", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
results = []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_400(port, path, body, mention=None, status=400, timeout=30.0):
    code, j = post(port, path, body, timeout=timeout)
    check(code == status, f"expected {status}, got {code}: {str(j)[:300]}")
    if mention:
        msg = j["error"]["message"] if isinstance(j, dict) else str(j)
        check(mention in msg, f"the error does not name {mention!r}: {msg[:300]}")
    return j


# ---------------------------------------------------------------------------------------------------------


def case_deep_json(srv):
    deep = lambda n: "[" * n + "1" + "]" * n
    bodies = [
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": ' + deep(20000) + '}]}'),
        ("/tokenize", '{"prompt": ' + deep(100000) + '}'),
        ("/v1/completions", '{"prompt": "x", "max_tokens": ' + deep(50000) + '}'),
        ("/v1/completions", '{"model": ' + deep(50000) + ', "prompt": "x"}'),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "tools": ' + deep(50000) + '}'),
        ("/v1/chat/completions",
         '{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": ' + deep(50000) + '}}'),
        ("/detokenize", '{"tokens": ' + deep(100000) + '}'),
        ("/v1/completions", '{"prompt": "x", "stop": ' + "{\"a\":" * 40000 + "1" + "}" * 40000 + '}'),
    ]
    for path, body in bodies:
        code, j = post(srv.port, path, body.encode())
        check(code == 400, f"{path}: expected 400, got {code}")
        check(len(json.dumps(j)) < 2000, f"{path}: the error message echoes the value ({len(json.dumps(j))} bytes)")


def case_amplification(srv):
    before = srv.rss_mb()
    body = {"prompt": ["Once upon a time"] * 400, "n": 128, "max_tokens": 256,
            "stop": [f"stop{i}" for i in range(1000)]}
    t = time.time()
    code, j = post(srv.port, "/v1/completions", body)
    check(code == 400, f"expected 400 for 400 prompts x n=128 x 1000 stops, got {code}")
    check(time.time() - t < 5, "the refusal took more than 5 s")
    # Variants: each dimension alone beyond its limit.
    expect_400(srv.port, "/v1/completions", {"prompt": "x", "stop": ["s" * 10] * 100000})
    expect_400(srv.port, "/v1/completions", {"prompt": ["x"] * 100000, "max_tokens": 1})
    expect_400(srv.port, "/v1/completions", {"prompt": "x", "n": 100000, "max_tokens": 1})
    expect_400(srv.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}] * 200000})
    after = srv.rss_mb()
    check(after - before < 256, f"RSS grew from {before:.0f} MB to {after:.0f} MB")
    print(f"    RSS {before:.0f} MB -> {after:.0f} MB")


def case_template_arithmetic_and_budgets(srv):
    msgs = [{"role": "user", "content": "hi"}]
    # INT64_MIN // -1 overflows int64: the renderer gives the float Python's unbounded ints round to (no
    # SIGFPE); division by zero is a template error.
    code, j = post(srv.port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1,
                                                      "chat_template_kwargs": {"a": INT64_MIN, "b": -1}})
    check(code == 200, f"INT64_MIN // -1: {code} {str(j)[:200]}")
    for kwargs in ({"a": 7, "b": 0}, {"a": INT64_MIN, "b": 0}):
        expect_400(srv.port, "/v1/chat/completions", {"messages": msgs, "chat_template_kwargs": kwargs},
                   mention="division by zero")
    for kwargs in ({"loops": 10**10}, {"rep": 10**10}, {"loops": 2**62}, {"rep": 2**40}):
        t = time.time()
        expect_400(srv.port, "/v1/chat/completions", {"messages": msgs, "chat_template_kwargs": kwargs}, timeout=60)
        check(time.time() - t < 30, f"{kwargs}: the render ran {time.time() - t:.1f} s")
    # The same through /tokenize, which renders too.
    expect_400(srv.port, "/tokenize", {"messages": msgs, "chat_template_kwargs": {"loops": 10**10}}, timeout=60)


def case_slow_clients(srv):
    # 200 connections sending their headers a byte a second; meanwhile a normal request is served fast.
    stop = threading.Event()
    socks = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"P")
        socks.append(s)

    def drip():
        while not stop.wait(1.0):
            for s in socks:
                try:
                    s.sendall(b"O")
                except OSError:
                    pass

    t = threading.Thread(target=drip)
    t.start()
    try:
        time.sleep(1.5)
        for _ in range(3):
            start = time.time()
            code, j = post(srv.port, "/v1/completions", dict(GREEDY, max_tokens=4), timeout=10)
            took = time.time() - start
            check(code == 200, f"normal request got {code} with 200 slow connections open")
            check(took < 1.0, f"normal request took {took:.2f} s with 200 slow connections open")
        # Connections that send nothing at all do not hold anything either.
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(50)]
        code, _ = post(srv.port, "/v1/completions", dict(GREEDY, max_tokens=4), timeout=10)
        check(code == 200, "normal request failed with idle connections open")
        for s in idle:
            s.close()
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def case_http_limits(srv):
    port = srv.port
    # A body announced beyond the limit is refused before it is read.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 1000)
        status, _, _, _ = read_response(s, time.time() + 10)
        check(status == 413, f"100 MB body: expected 413, got {status}")
    # Too many header fields; header bytes beyond the limit.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 100000 + b"\r\n")
        status, _, _, _ = read_response(s, time.time() + 10)
        check(status == 431, f"100,000 headers: expected 431, got {status}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (5 << 20) + b"\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before all of it is sent
        status, _, _, _ = read_response(s, time.time() + 10)
        check(status == 431, f"5 MB header: expected 431, got {status}")
    # Malformed request lines and headers.
    for raw in (b"GARBAGE\r\n\r\n", b"GET /health HTTP/9.9\r\n\r\n", b"GET /health HTTP/1.1\r\nNoColon\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            status, _, _, _ = read_response(s, time.time() + 10)
            check(400 <= status < 600, f"{raw[:40]!r}: expected an error status, got {status}")
    # Pipelining: three requests in one write, three responses in order.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        one = json.dumps(dict(GREEDY, max_tokens=2)).encode()
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
               + str(len(one)).encode() + b"\r\n\r\n" + one)
        s.sendall(req + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.time() + 10
        rest = b""

        class Rest:
            def recv(self, n):
                nonlocal rest
                if rest:
                    out, rest = rest, b""
                    return out
                return s.recv(n)

            def settimeout(self, t):
                s.settimeout(t)

        got = []
        for _ in range(3):
            status, _, body, rest = read_response(Rest(), deadline)
            got.append((status, body))
        check([g[0] for g in got] == [200, 200, 200], f"pipelined statuses {[g[0] for g in got]}")
        check(b"text_completion" in got[0][1] and b"\"list\"" in got[2][1], "pipelined responses out of order")
    # Methods and paths.
    status, h, _ = request(port, "GET", "/v1/completions")
    check(status == 405 and h.get("allow") == "POST", f"GET /v1/completions: {status} {h.get('allow')}")
    status, _, _ = request(port, "DELETE", "/health")
    check(status == 405, f"DELETE /health: {status}")
    status, _, _ = request(port, "GET", "/nope")
    check(status == 404, f"GET /nope: {status}")
    # Expect: 100-continue.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        one = json.dumps(dict(GREEDY, max_tokens=1)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
                  + str(len(one)).encode() + b"\r\n\r\n")
        s.settimeout(5)
        first = s.recv(4096)
        check(first.startswith(b"HTTP/1.1 100"), f"no 100 Continue: {first[:40]!r}")
        s.sendall(one)
        status, _, _, _ = read_response(s, time.time() + 10)
        check(status == 200, f"after 100 Continue: {status}")


def case_keep_alive_latency(srv):
    # Nagle's algorithm against delayed ACKs makes each later request on a kept-alive connection ~40 ms.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        times = []
        for _ in range(12):
            t = time.time()
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, _, _ = read_response(s, time.time() + 10)
            times.append(time.time() - t)
            check(status == 200, f"kept-alive /health: {status}")
        median = sorted(times[1:])[len(times[1:]) // 2]
        check(median < 0.02, f"median request on a kept-alive connection took {median * 1000:.1f} ms")
        print(f"    kept-alive median {median * 1000:.2f} ms")


def case_numbers(srv):
    p = srv.port
    for field, value in (("n", 4294967297), ("top_k", 4294967297), ("max_tokens", 4294967297), ("n", -1),
                         ("max_tokens", 0), ("max_tokens", 2**64), ("logprobs", 4294967297), ("top_k", -2),
                         ("n", 1.5), ("temperature", -1), ("top_p", 0), ("top_p", 1.5)):
        j = expect_400(p, "/v1/completions", {"prompt": "x", field: value}, mention=field)
        msg = j["error"]["message"]
        check("727379968" not in msg and "-2147483647" not in msg, f"{field}={value}: a wrapped value: {msg}")
    expect_400(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
               mention="max_completion_tokens")
    expect_400(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2**33,
                                           "logprobs": True}, mention="top_logprobs")
    expect_400(p, "/detokenize", {"tokens": [2**40]})
    expect_400(p, "/v1/completions", {"prompt": [2**40]})
    expect_400(p, "/v1/completions", {"prompt": "x", "stop_token_ids": [2**40]})


UNSUPPORTED = [
    ("/v1/completions", "logit_bias", {"1": 5}),
    ("/v1/completions", "echo", True),
    ("/v1/completions", "best_of", 3),
    ("/v1/completions", "prompt_logprobs", 1),
    ("/v1/completions", "suffix", "x"),
    ("/v1/completions", "guided_json", {"type": "object"}),
    ("/v1/completions", "guided_regex", "a+"),
    ("/v1/completions", "guided_choice", ["a", "b"]),
    ("/v1/completions", "structured_outputs", {"json": {"type": "object"}}),
    ("/v1/completions", "response_format", {"type": "json_object"}),
    ("/v1/completions", "include_stop_str_in_output", True),
    ("/v1/chat/completions", "tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("/v1/chat/completions", "tool_choice", "required"),
    ("/v1/chat/completions", "response_format", {"type": "json_object"}),
    ("/v1/chat/completions", "logit_bias", {"1": 5}),
    ("/v1/chat/completions", "guided_grammar", "root ::= \"a\""),
    ("/v1/chat/completions", "prompt_logprobs", 1),
    ("/v1/chat/completions", "best_of", 2),
]


def case_unsupported_fields(srv):
    for path, field, value in UNSUPPORTED:
        body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
        body[field] = value
        expect_400(srv.port, path, body, mention=field)


def case_logprobs(srv):
    p = srv.port
    code, j = post(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Once"}], "max_tokens": 8,
                                                "temperature": 0, "logprobs": True})
    check(code == 200, f"chat logprobs: {code}")
    content = j["choices"][0]["logprobs"]["content"]
    check(len(content) == 8, f"{len(content)} logprob entries for 8 tokens")
    check(any(c["logprob"] < 0 for c in content), "every chat logprob is 0.0")
    check(all(c["token"] != "" or c["bytes"] for c in content), "a chat token with empty text and bytes")
    text = j["choices"][0]["message"]["content"]
    check("".join(c["token"] for c in content) == text, "chat tokens do not rebuild the text")
    for lp in (0, 3):
        code, j = post(p, "/v1/completions", dict(GREEDY, max_tokens=12, logprobs=lp))
        check(code == 200, f"completion logprobs={lp}: {code}")
        c = j["choices"][0]
        lps = c["logprobs"]
        check(any(x < 0 for x in lps["token_logprobs"]), f"logprobs={lp}: every logprob is 0.0")
        check("".join(lps["tokens"]) == c["text"], f"logprobs={lp}: tokens {lps['tokens']} do not rebuild {c['text']!r}")
        for off, tok in zip(lps["text_offset"], lps["tokens"]):
            check(c["text"][off:off + len(tok)] == tok, f"text_offset {off} does not index {tok!r}")


def case_two_servers_one_port(srv):
    second = subprocess.run([BIN, "serve", MODEL, "--host", "127.0.0.1", "--port", str(srv.port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, text=True)
    check(second.returncode != 0, "a second server on the same port started")
    check("in use" in second.stdout, f"no 'address in use' message: {second.stdout[-300:]}")


def case_engine_refusals(srv):
    # Requests the engine refuses come back as 400s, not 500s or crashes.
    expect_400(srv.port, "/v1/completions", {"prompt": [100000]})
    expect_400(srv.port, "/v1/completions", {"prompt": "x" * 10000, "max_tokens": 10})


def sigterm_case(extra, expect_drained):
    """SIGTERM while streams and whole requests run; every client gets a proper end."""
    srv = Server(*extra)
    try:
        check(srv.port > 0, "server did not start: " + srv.output()[-500:])
        results = {}
        body = {"prompt": "Once", "max_tokens": 400, "temperature": 0, "ignore_eos": True}

        def stream(i):
            try:
                results[i] = request(srv.port, "POST", "/v1/completions", dict(body, stream=True), timeout=60)
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                results[i] = e

        def whole(i):
            try:
                results[i] = request(srv.port, "POST", "/v1/completions", body, timeout=60)
            except Exception as e:  # noqa: BLE001
                results[i] = e

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(6)]
        threads += [threading.Thread(target=whole, args=(i,)) for i in range(6, 10)]
        # One client that sends a request and never reads: it must not keep the server from exiting.
        slow = socket.create_connection(("127.0.0.1", srv.port))
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        one = json.dumps(dict(body, stream=True)).encode()
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(one)).encode()
                     + b"\r\n\r\n" + one)
        for t in threads:
            t.start()
        time.sleep(0.3)
        start = time.time()
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        code = srv.proc.wait(30)
        took = time.time() - start
        slow.close()
        check(code == 0, f"exit status {code}")
        check(took < 20, f"shutdown took {took:.1f} s")
        reasons = []
        for i in range(10):
            r = results.get(i)
            check(isinstance(r, tuple), f"client {i}: {r!r}")
            status, _, b = r
            check(status == 200, f"client {i}: status {status}")
            if i < 6:
                ev = sse(b)
                check(ev and ev[-1] == "[DONE]", f"stream {i} has no [DONE]")
                fins = [e["choices"][0]["finish_reason"] for e in ev[:-1] if e["choices"]
                        and e["choices"][0]["finish_reason"]]
                check(len(fins) == 1, f"stream {i}: finish reasons {fins}")
                reasons.append(fins[0])
            else:
                j = json.loads(b)
                reasons.append(j["choices"][0]["finish_reason"])
        if expect_drained:
            check(all(r == "length" for r in reasons), f"drained: finish reasons {reasons}")
        else:
            check("abort" in reasons, f"no request was aborted: {reasons}")
            check(set(reasons) <= {"abort", "length"}, f"finish reasons {reasons}")
        print(f"    shutdown in {took:.2f} s, finish reasons {sorted(set(reasons))}")
    finally:
        srv.close()


def main():
    srv = Server()
    if srv.port == 0:
        print("FAILED: the server did not start\n" + srv.output()[-2000:])
        print("0 passed, 1 failed")
        return 1
    code, base = post(srv.port, "/v1/completions", GREEDY)
    assert code == 200, base
    baseline = base["choices"][0]["text"]
    cases = [case_deep_json, case_amplification, case_template_arithmetic_and_budgets, case_slow_clients,
             case_http_limits, case_keep_alive_latency, case_numbers, case_unsupported_fields, case_logprobs,
             case_two_servers_one_port, case_engine_refusals]
    passed = failed = 0
    for case in cases:
        name = case.__name__[5:]
        t = time.time()
        try:
            case(srv)
            check(srv.proc.poll() is None, "the server died")
            code, j = post(srv.port, "/v1/completions", GREEDY, timeout=30)
            check(code == 200 and j["choices"][0]["text"] == baseline, "the greedy text changed after the case")
            print(f"PASS {name} ({time.time() - t:.1f} s)")
            passed += 1
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"FAIL {name}: {e}")
            failed += 1
            if srv.proc.poll() is not None:
                print(srv.output()[-3000:])
                srv.close()
                srv = Server()
    srv.close()
    for name, extra, drained in (("sigterm_abort", [], False),
                                 ("sigterm_drain", ["--shutdown-timeout", "30"], True)):
        t = time.time()
        try:
            sigterm_case(extra, drained)
            print(f"PASS {name} ({time.time() - t:.1f} s)")
            passed += 1
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {name}: {e}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
