"""LLM.generate(): the stories260K golden text, the CLI's output token for token (greedy, sampled,
logprobs), batched against one by one, n, stops, prompt forms and request errors."""

from __future__ import annotations

import json

import pytest

from pagoda import LLM, RequestOutput, SamplingParams, TokensPrompt

from conftest import cli_error, run_cli

GREEDY = SamplingParams(temperature=0, max_tokens=256)


@pytest.fixture(scope="module")
def llm(stories):
    return LLM(model=stories)


def cli_json(pagoda_bin, *args):
    r = run_cli(pagoda_bin, "generate", *args, "--output-json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_greedy_golden_text(llm, golden):
    (out,) = llm.generate("", GREEDY, use_tqdm=False)
    assert isinstance(out, RequestOutput)
    assert out.prompt == "" and out.prompt_token_ids == [1] and out.finished
    c = out.outputs[0]
    assert c.text == golden["greedy"]["text"]
    assert c.token_ids == golden["hf_reference"]["greedy_token_ids"]
    assert c.finish_reason == "length" and c.stop_reason is None and c.index == 0
    assert c.cumulative_logprob is None and c.logprobs is None


def test_kv_cache_options_equal_cli(stories, pagoda_bin, golden):
    """kv_cache_dtype_skip_layers (vLLM's list) reaches the engine as the CLI's option: stories260K's TurboQuant
    cache quantizes layer 2 only (the others are boundary layers), so skipping it leaves a bfloat16 cache and
    the golden text; without it the greedy tokens are the CLI's with the same cache."""
    params = SamplingParams(temperature=0, max_tokens=64)
    ids = golden["hf_reference"]["greedy_token_ids"][:64]
    for skip in ([2], [2, "sliding_window"], "2"):
        llm = LLM(model=stories, device="cpu", kv_cache_dtype="turboquant_4bit_nc", kv_cache_dtype_skip_layers=skip)
        (out,) = llm.generate("", params, use_tqdm=False)
        assert out.outputs[0].token_ids == ids, skip
    (out,) = LLM(model=stories, device="cpu", kv_cache_dtype="turboquant_4bit_nc").generate("", params, use_tqdm=False)
    cli = cli_json(pagoda_bin, "--model", stories, "--device", "cpu", "--kv-cache-dtype", "turboquant_4bit_nc",
                   "--prompt", "", "--temperature", "0", "--max-tokens", "64")
    assert out.outputs[0].token_ids == cli["token_ids"]
    assert out.outputs[0].token_ids != ids  # the quantized layer 2 changes the text of this tiny model


def test_greedy_equals_cli(llm, stories, pagoda_bin):
    cli = cli_json(pagoda_bin, "--model", stories, "--prompt", "", "--temperature", "0", "--max-tokens", "256")
    (out,) = llm.generate("", GREEDY, use_tqdm=False)
    assert out.prompt_token_ids == cli["prompt_token_ids"]
    assert out.outputs[0].token_ids == cli["token_ids"]
    assert out.outputs[0].text == cli["text"]


def test_sampled_equals_cli(stories, pagoda_bin):
    # The first request of LLM(seed=S) samples with seed S, as `pagoda generate --seed S` does.
    llm = LLM(model=stories, seed=1234)
    (out,) = llm.generate("Once upon a time", SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=64),
                          use_tqdm=False)
    cli = cli_json(pagoda_bin, "--model", stories, "--seed", "1234", "--prompt", "Once upon a time",
                   "--temperature", "0.8", "--top-p", "0.9", "--top-k", "50", "--max-tokens", "64")
    assert out.outputs[0].token_ids == cli["token_ids"]
    assert out.outputs[0].text == cli["text"]
    # An explicit SamplingParams.seed gives the same stream whatever the LLM's seed and request count.
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=64, seed=1234)
    assert LLM(model=stories).generate("Once upon a time", params, use_tqdm=False)[0].outputs[0].token_ids == cli["token_ids"]


def test_logprobs_equal_cli(llm, stories, pagoda_bin):
    (out,) = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, logprobs=3), use_tqdm=False)
    cli = cli_json(pagoda_bin, "--model", stories, "--prompt", "Once upon a time", "--temperature", "0",
                   "--max-tokens", "12", "--logprobs", "3")
    c = out.outputs[0]
    assert c.token_ids == cli["token_ids"]
    assert len(c.logprobs) == 12
    tok = llm.get_tokenizer()
    total = 0.0
    for token, entry, top in zip(c.token_ids, c.logprobs, cli["logprobs"]):
        # Greedy: the sampled token is the most likely, so the dict is the top 3 with ranks 1-3.
        assert list(entry) == [t["token_id"] for t in top]
        assert [e.logprob for e in entry.values()] == pytest.approx([t["logprob"] for t in top], abs=1e-6)
        assert [e.rank for e in entry.values()] == [1, 2, 3]
        assert entry[token].decoded_token == tok.decode([token])
        total += entry[token].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-5)
    # logprobs=0: the sampled token alone.
    (out,) = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=4, logprobs=0), use_tqdm=False)
    assert [list(e) for e in out.outputs[0].logprobs] == [[t] for t in out.outputs[0].token_ids]


PROMPTS = ["Once upon a time", "The cat sat", "Lily and Tom went to the park to play with a big red ball",
           "A", "One day, a little bird", "Sam was sad because"]


@pytest.mark.parametrize("model", ["stories", "dummy:tiny"])
def test_batched_equals_one_by_one(model, stories):
    llm = LLM(model=stories if model == "stories" else model)
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True) if i % 2 == 0 else
              SamplingParams(temperature=1.0, top_p=0.95, seed=100 + i, max_tokens=40, ignore_eos=True)
              for i in range(len(PROMPTS))]
    batched = llm.generate(PROMPTS, params, use_tqdm=False)
    alone = [llm.generate(p, sp, use_tqdm=False)[0] for p, sp in zip(PROMPTS, params)]
    assert [o.prompt for o in batched] == PROMPTS
    assert [o.outputs[0].token_ids for o in batched] == [o.outputs[0].token_ids for o in alone]
    assert [o.outputs[0].text for o in batched] == [o.outputs[0].text for o in alone]
    assert [o.request_id for o in batched] == [str(i) for i in range(len(PROMPTS))]


def test_n_completions(llm):
    params = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=24)
    (out,) = llm.generate("Once upon a time", params, use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out.outputs}) == 3
    (again,) = llm.generate("Once upon a time", params, use_tqdm=False)
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in out.outputs]


def test_stop_string_and_stop_token(llm):
    (out,) = llm.generate("", SamplingParams(temperature=0, max_tokens=256, stop=["Lily"]), use_tqdm=False)
    c = out.outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == "Lily"
    assert c.text == "Once upon a time, there was a little girl named "
    full = llm.generate("", SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)[0].outputs[0].token_ids
    (out,) = llm.generate("", SamplingParams(temperature=0, max_tokens=64, stop_token_ids=[full[5]]), use_tqdm=False)
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == full[5]
    assert out.outputs[0].token_ids == full[:6]


def test_max_tokens_none_runs_to_the_context_length(stories):
    llm = LLM(model=stories, max_model_len=48)
    (out,) = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                          use_tqdm=False)
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 48
    assert out.outputs[0].finish_reason == "length"


def test_prompt_forms(llm):
    ids = llm.get_tokenizer().encode("Once upon a time")
    params = SamplingParams(temperature=0, max_tokens=8)
    want = llm.generate("Once upon a time", params, use_tqdm=False)[0].outputs[0].token_ids
    outs = llm.generate([TokensPrompt(prompt_token_ids=ids), {"prompt": "Once upon a time"}, ids], params,
                        use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [want] * 3
    assert [o.prompt for o in outs] == [None, "Once upon a time", None]
    assert llm.generate(ids, params, use_tqdm=False)[0].outputs[0].token_ids == want  # one id list = one prompt
    assert llm.generate(prompt_token_ids=[ids, ids], sampling_params=params, use_tqdm=False)[1].outputs[0].token_ids == want


def test_default_sampling_params(llm):
    (out,) = llm.generate("Once upon a time", use_tqdm=False)
    assert len(out.outputs[0].token_ids) <= 16  # vLLM's default max_tokens


def test_request_errors(stories):
    llm = LLM(model=stories, max_model_len=16)
    with pytest.raises(ValueError, match="^The lengths of prompts and sampling_params must be the same.$"):
        llm.generate(["a", "b"], [SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="^request 1: ") as e:
        llm.generate(["a", "Once upon a time there was a little girl named Lily who loved to play"], use_tqdm=False)
    assert "max_model_len" in str(e.value) or "16" in str(e.value)
    # The failed batch left nothing behind: the next one runs.
    assert llm.generate("a", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].finish_reason == "length"


@pytest.mark.parametrize("field,value,flag", [
    ("temperature", -1.0, "--temperature"),
    ("top_p", 0.0, "--top-p"),
    ("top_p", 1.5, "--top-p"),
    ("min_p", 2.0, "--min-p"),
    ("top_k", -2, "--top-k"),
    ("repetition_penalty", 0.0, "--repetition-penalty"),
    ("presence_penalty", 3.0, "--presence-penalty"),
    ("frequency_penalty", -2.5, "--frequency-penalty"),
])
def test_sampling_errors_are_the_clis(field, value, flag, pagoda_bin):
    with pytest.raises(ValueError) as e:
        SamplingParams(**{field: value})
    r = run_cli(pagoda_bin, "generate", flag, str(value), "--max-tokens", "1")
    assert r.returncode == 2
    assert str(e.value) == cli_error(r)


def test_unsupported_sampling_fields_are_refused():
    with pytest.raises(ValueError, match="min_tokens is not supported"):
        SamplingParams(min_tokens=3)
    with pytest.raises(ValueError, match="n must be at least 1"):
        SamplingParams(n=0)
    assert SamplingParams(stop="x").stop == ["x"]


def test_skip_tokenizer_init(stories, llm):
    raw = LLM(model=stories, skip_tokenizer_init=True)
    ids = llm.get_tokenizer().encode("Once upon a time")
    (out,) = raw.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert out.outputs[0].text == ""
    assert out.outputs[0].token_ids == llm.generate(ids, SamplingParams(temperature=0, max_tokens=8),
                                                    use_tqdm=False)[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="no tokenizer"):
        raw.generate("text", use_tqdm=False)
