"""Errors are Python exceptions with the CLI's texts: engine options (ValueError, the CLI's exit status 2)
and failures while the engine starts, such as a forced attention backend that cannot run (RuntimeError,
exit status 1). None of them ends the process."""

from __future__ import annotations

import pathlib

import pytest

from pagoda import LLM

from conftest import cli_error, run_cli

# Each case: LLM keyword arguments, and the same as `pagoda generate` arguments.
CONFIG_ERRORS = [
    ({"kv_cache_dtype": "FP8"}, ["--kv-cache-dtype", "FP8"]),
    ({"kv_cache_dtype": "nvfp4"}, ["--kv-cache-dtype", "nvfp4"]),
    ({"dtype": "fp64"}, ["--dtype", "fp64"]),
    ({"block_size": 0}, ["--block-size", "0"]),
    ({"block_size": 1 << 20}, ["--block-size", str(1 << 20)]),
    ({"max_model_len": "abc"}, ["--max-model-len", "abc"]),
    ({"max_num_seqs": 0}, ["--max-num-seqs", "0"]),
    ({"gpu_memory_utilization": 1.5}, ["--gpu-memory-utilization", "1.5"]),
    ({"device": "tpu"}, ["--device", "tpu"]),
    ({"load_format": "pt"}, ["--load-format", "pt"]),
    ({"kv_cache_dtype_skip_layers": ["first"]}, ["--kv-cache-dtype-skip-layers", "first"]),
    ({"log_level": "LOUD"}, ["--log-level", "LOUD"]),
    ({"config": "engine.txt"}, ["--config", "engine.txt"]),
    ({"json_config": "/nonexistent/engine.json"}, ["--json-config", "/nonexistent/engine.json"]),
]


@pytest.mark.parametrize("kwargs,argv", CONFIG_ERRORS, ids=[" ".join(a) for _, a in CONFIG_ERRORS])
def test_config_errors_are_the_clis(kwargs, argv, pagoda_bin):
    r = run_cli(pagoda_bin, "generate", *argv)
    assert r.returncode == 2, r.stderr
    with pytest.raises(ValueError) as e:
        LLM(model="dummy:tiny", **kwargs)
    assert str(e.value) == cli_error(r)


def test_kv_cache_dtype_skip_layers_errors_are_the_clis(pagoda_bin):
    """Checked at engine start, against the model's layers and the KV cache dtype it resolves."""
    cases = [({"kv_cache_dtype_skip_layers": [1]}, ["--kv-cache-dtype-skip-layers", "1"]),
             ({"kv_cache_dtype": "fp8", "kv_cache_dtype_skip_layers": [0, 9]},
              ["--kv-cache-dtype", "fp8", "--kv-cache-dtype-skip-layers", "0", "9"])]
    for kwargs, argv in cases:
        r = run_cli(pagoda_bin, "generate", "--model", "dummy:tiny", *argv)
        assert r.returncode == 2, r.stderr
        with pytest.raises(ValueError) as e:
            LLM(model="dummy:tiny", **kwargs)
        assert str(e.value) == cli_error(r)


def test_environment_errors_are_the_clis(pagoda_bin, monkeypatch):
    for var, value in (("PAGODA_KV_CACHE_LAYOUT", "NDH"), ("PAGODA_BATCH_INVARIANT", "yes")):
        r = run_cli(pagoda_bin, "generate", env={var: value})
        assert r.returncode == 2
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError) as e:
                LLM(model="dummy:tiny")
        assert str(e.value) == cli_error(r)


def test_missing_model_is_the_clis_error(pagoda_bin, tmp_path):
    missing = str(tmp_path / "no-such-model")
    r = run_cli(pagoda_bin, "generate", "--model", missing)
    assert r.returncode != 0
    with pytest.raises((ValueError, RuntimeError)) as e:
        LLM(model=missing)
    assert str(e.value) == cli_error(r)
    assert isinstance(e.value, ValueError) == (r.returncode == 2)


# A forced backend that cannot run this model: its construction check names the reason (spec §6.4).
FORCED = [
    ({"attention_backend": "CPU_ATTN", "kv_cache_dtype": "fp8"},
     ["--attention-backend", "CPU_ATTN", "--kv-cache-dtype", "fp8"],
     "FP8 KV cache requires head_size divisible by 32 on CPU."),
    ({"attention_config": {"backend": "CPU_ATTN"}, "kv_cache_dtype": "turboquant_k8v4"},
     ["-ac.backend", "CPU_ATTN", "--kv-cache-dtype", "turboquant_k8v4"],
     "CPU_ATTN does not support turboquant_k8v4 kv-cache."),
]


@pytest.mark.parametrize("kwargs,argv,reason", FORCED, ids=[r for _, _, r in FORCED])
def test_forced_backend_that_cannot_run_raises_the_reason(kwargs, argv, reason, stories, pagoda_bin):
    r = run_cli(pagoda_bin, "generate", "--model", stories, "--device", "cpu", *argv)
    assert r.returncode == 1
    assert cli_error(r) == reason
    with pytest.raises(RuntimeError) as e:
        LLM(model=stories, device="cpu", **kwargs)
    assert str(e.value) == reason


def test_forced_backend_invalid_on_the_gpu(stories, pagoda_bin):
    """On a CUDA device, an invalid forced backend fails selection with its reasons (spec §5.2)."""
    probe = run_cli(pagoda_bin, "generate", "--model", stories, "--device", "cuda", "--max-tokens", "1")
    if probe.returncode != 0:
        pytest.skip("no CUDA device: " + cli_error(probe))
    want = "Selected backend FLEX_ATTENTION is not valid for this configuration. Reason: ['kv_cache_dtype not supported']"
    r = run_cli(pagoda_bin, "generate", "--model", stories, "--device", "cuda", "--attention-backend", "FLEX_ATTENTION",
                "--kv-cache-dtype", "fp8")
    assert cli_error(r) == want
    with pytest.raises(RuntimeError) as e:
        LLM(model=stories, device="cuda", attention_backend="FLEX_ATTENTION", kv_cache_dtype="fp8")
    assert str(e.value) == want


def test_python_side_argument_errors():
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        LLM(model="dummy:tiny", no_such_option=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'port'"):  # a server option, not an engine one
        LLM(model="dummy:tiny", port=8000)
    with pytest.raises(ValueError, match="tensor_parallel_size=2 is not supported"):
        LLM(model="dummy:tiny", tensor_parallel_size=2)
    LLM(model="dummy:tiny", tensor_parallel_size=1, trust_remote_code=True)  # vLLM arguments with nothing to do
    with pytest.raises(ValueError, match="runner='pooling' is not supported"):
        LLM(model="dummy:tiny", runner="pooling")
    with pytest.raises(ValueError, match="convert='embed' is not supported"):
        LLM(model="dummy:tiny", convert="embed")
    LLM(model="dummy:tiny", runner="generate", convert="none")
    with pytest.raises(ValueError, match="hf_token must be"):
        LLM(model="dummy:tiny", hf_token=5)


def test_hf_token_reaches_the_hub_only_while_the_engine_starts(monkeypatch):
    """A string hf_token is the token the hub client sends while the engine starts (a local stand-in for the
    hub records the Authorization header and answers 404), and the environment is as it was afterwards."""
    import http.server
    import os
    import threading
    seen = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server name)
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("HF_HOME", str(pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"pagoda-hf-{os.getpid()}"))
        with pytest.raises(RuntimeError):
            LLM(model="no-such-org/no-such-model", hf_token="hf_test_token")
        assert seen and all(h == "Bearer hf_test_token" for h in seen), seen
        assert "HF_TOKEN" not in os.environ
        seen.clear()
        with pytest.raises(RuntimeError):
            LLM(model="no-such-org/no-such-model")
        assert seen and all(h is None for h in seen), seen
    finally:
        server.shutdown()
