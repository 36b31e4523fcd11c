"""SmolLM2-135M-Instruct (the built-in Q4_1 GGUF model) against an independent float32 numpy reference that
dequantizes the same file (gguf_reference.py): the reference on its own (its ids, its answer to a chat, its
emulation of ggml's activation quantization, its RoPE layout), then pagoda's greedy tokens and top-20
logprobs on 8 prompts, teacher-forced, within a bound derived from what the activation quantization pagoda
shares with llama.cpp (and its bfloat16 KV cache) does to the reference's logits."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

import gguf
from gguf_reference import GgufLlama, _load_linear, _matmul, log_softmax, quantize_q8_blocks, round_bf16, smollm2_gguf

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the template's default

# "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n" (no system turn), ids from
# the HF `tokenizers` BPE built from the file's vocabulary and merges (digits split, byte-level).
FRANCE_CHATML_IDS = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
# The same question rendered by the file's chat template, which adds its default system turn.
FRANCE_CHAT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
                   19712, 8182, 2, 198, *FRANCE_CHATML_IDS]
# "The capital of France is Paris.<|im_end|>"
FRANCE_ANSWER_IDS = [504, 3575, 282, 4649, 314, 7042, 30, 2]
# `pagoda generate`'s default question, "What is the capital of Japan?", as the template renders it, and the
# answer "The capital of Japan is Tokyo.<|im_end|>".
JAPAN_CHAT_IDS = [*FRANCE_CHAT_IDS[:29], 3085, *FRANCE_CHAT_IDS[30:]]
JAPAN_ANSWER_IDS = [504, 3575, 282, 3085, 314, 19081, 30, 2]

PARAGRAPH = (
    "Photosynthesis is the process by which green plants, algae and some bacteria turn light into chemical energy. "
    "In the chloroplasts of a leaf, chlorophyll absorbs mostly blue and red light. That energy splits water "
    "molecules, releasing oxygen, and drives the reactions of the Calvin cycle, which fix carbon dioxide from the "
    "air into sugars. The plant uses these sugars to grow, and stores the surplus as starch. Almost all life on "
    "Earth depends on this process, directly or indirectly: it provides the food at the base of nearly every food "
    "chain and the oxygen that animals breathe. Scientists estimate that photosynthesis captures about 130 "
    "terawatts of energy worldwide, roughly eight times the power consumed by human civilization.")
PLAIN_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily who",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "1, 2, 3, 5, 8, 13, 21,",
    PARAGRAPH + "\n\nIn summary,",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise assistant who answers in one sentence."},
     {"role": "user", "content": "Hi! Who are you?"},
     {"role": "assistant", "content": "I am an assistant."},
     {"role": "user", "content": "Name three colors of the rainbow."}],
    [{"role": "user", "content": "Summarize the following text in two sentences.\n\n" + PARAGRAPH + "\n\n"
      + PARAGRAPH.replace("Photosynthesis", "This process", 1)}],
]
STEPS = 32  # generated tokens per prompt, EOS ignored: 8 x 32 teacher-forced steps compared
TOP = 20    # logprobs per step


def chatml(messages: list[dict]) -> str:
    """The file's chat template written out by hand (ChatML, a default system turn when none is given)."""
    if messages[0]["role"] != "system":
        messages = [{"role": "system", "content": SYSTEM}, *messages]
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def gguf_path():
    path = smollm2_gguf()
    if path is None:
        pytest.skip("the built-in model's file is not in pagoda's model cache: run scripts/fetch-models.sh")
    return path


@pytest.fixture(scope="module")
def ref(gguf_path) -> GgufLlama:
    return GgufLlama(gguf_path)


# ---- the reference on its own ----

def test_reference_ids_spell_the_prompts(ref):
    assert (ref.detokenize(FRANCE_CHATML_IDS)
            == "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert ref.detokenize(FRANCE_CHAT_IDS) == chatml(CHATS[0])
    assert ref.detokenize(FRANCE_ANSWER_IDS) == "The capital of France is Paris.<|im_end|>"
    assert ref.detokenize(JAPAN_CHAT_IDS) == chatml([{"role": "user", "content": "What is the capital of Japan?"}])
    assert ref.detokenize(JAPAN_ANSWER_IDS) == "The capital of Japan is Tokyo.<|im_end|>"


def test_reference_answers_the_chat(ref):
    # Greedy answers in English and stops at <|im_end|>, with and without the template's system turn.
    for prompt in (FRANCE_CHATML_IDS, FRANCE_CHAT_IDS):
        tokens, _ = ref.greedy(prompt, 16)
        assert tokens == FRANCE_ANSWER_IDS, ref.detokenize(tokens)
    # With the system turn, "The" leads the runner-up "L" by only 0.08 nats at the first step, and pagoda's
    # roundings (like llama.cpp's) flip it into "L'Étoile, la ...". The default question is one whose answer
    # every step leads by at least 0.85 nats, in float32 and with those roundings alike.
    for act_quant in (False, True):
        tokens, _ = ref.greedy(JAPAN_CHAT_IDS, 16, act_quant=act_quant, kv_bf16=act_quant)
        assert tokens == JAPAN_ANSWER_IDS, ref.detokenize(tokens)


def test_activation_quantization_is_ggml_block_arithmetic(ref):
    """The emulated quantized matmul equals ggml's integer form computed from the raw blocks in float64:
    Q4_1 x Q8_1: sum over blocks of d_w * d_x * sum(q_w * q_x) + m_w * s_x; Q8_0 x Q8_0: d_w * d_x * sum(q_w * q_x)."""
    rng = np.random.default_rng(0)
    for name in ("blk.3.ffn_down.weight", "token_embd.weight"):
        t = ref.tensors[name]
        rows = slice(0, 256)  # enough rows to cover both formats' blocks without the whole embedding
        raw = np.ascontiguousarray(t.data[rows]).reshape(256, -1, gguf.GGML_QUANT_SIZES[t.tensor_type][1])
        d_w = raw[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            m_w = raw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
            nib = raw[:, :, 4:]
            q_w = np.concatenate([nib & 15, nib >> 4], axis=-1).astype(np.int64)
        else:
            m_w = None
            q_w = raw[:, :, 2:].view(np.int8).astype(np.int64)
        x = rng.standard_normal((3, q_w.shape[1] * 32)).astype(np.float32)
        x[:, 7] *= 50  # an outlier, as the residual stream has, so one block's scale is set by it
        q_x, d_x, s_x = quantize_q8_blocks(x)
        assert np.abs(q_x).max() == 127 and np.all(q_x == np.round(q_x))
        want = np.einsum("rb,nb,rbk,nbk->nr", d_w, d_x.astype(np.float64), q_w, q_x.astype(np.int64))
        if m_w is not None:
            want += s_x.astype(np.float64) @ m_w.T
        lin = _load_linear([types.SimpleNamespace(data=t.data[rows], tensor_type=t.tensor_type)])
        got = _matmul(x, lin, act_quant=True)
        # float32 products and sums over 576-1536 terms: a few float32 ulps of the largest partial sum.
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() * 10, name


def test_bf16_rounding():
    # Round to nearest, ties to even, on bfloat16's 8-bit significand, against float64 arithmetic.
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000),
                        [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)]]).astype(np.float32)
    got = round_bf16(x).astype(np.float64)
    ulp = np.ldexp(1.0, np.frexp(x.astype(np.float64))[1] - 8)  # 2^(e - 8) for x = m 2^e, 1/2 <= |m| < 1
    np.testing.assert_array_equal(got, np.round(x / ulp) * ulp)  # x / ulp is exact; np.round ties to even
    assert list(got[-3:]) == [1.0, 1 + 2**-6, -1.0]


def test_reference_rope_on_gguf_rows_is_hf_rope(ref):
    """llama.cpp's converter permuted each head's q/k rows from HF's order (RoPE on halves x[i], x[i + d/2]) to
    adjacent pairs (x[2i], x[2i+1]). Un-permuting the rows and rotating halves gives the same attention scores
    as this reference's adjacent-pair RoPE on the rows as stored: the relation pagoda's loader relies on."""
    hd, nh, nkv = ref.head_dim, ref.n_heads, ref.n_kv_heads
    rng = np.random.default_rng(1)
    h = rng.standard_normal((7, ref.dim)).astype(np.float32)
    pos = np.arange(100, 107)
    w = ref.layers[5].qkv.w
    wq, wk = w[: nh * hd], w[nh * hd: (nh + nkv) * hd]

    def unpermute(rows, heads):  # inverse of convert_hf_to_gguf.py's LlamaModel.permute
        return rows.reshape(heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(rows.shape)

    def rope_halves(x):  # x [heads, n, hd]
        ang = pos[:, None] * ref._inv_freq[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def scores(q, k):  # [heads, n, n], query head j against KV head j // (nh // nkv)
        return q @ np.repeat(k, nh // nkv, axis=0).transpose(0, 2, 1)

    split = lambda y, heads: y.reshape(7, heads, hd).transpose(1, 0, 2)  # noqa: E731
    gguf_scores = scores(ref._rope(split(h @ wq.T, nh), pos), ref._rope(split(h @ wk.T, nkv), pos))
    hf_scores = scores(rope_halves(split(h @ unpermute(wq, nh).T, nh)),
                       rope_halves(split(h @ unpermute(wk, nkv).T, nkv)))
    np.testing.assert_allclose(gguf_scores, hf_scores, rtol=1e-4, atol=1e-4 * np.abs(hf_scores).max())
    # Without the un-permutation the two disagree: the test sees the row order.
    wrong = scores(rope_halves(split(h @ wq.T, nh)), rope_halves(split(h @ wk.T, nkv)))
    assert np.abs(wrong - gguf_scores).max() > 0.1 * np.abs(gguf_scores).max()


# ---- pagoda against the reference ----

@dataclasses.dataclass
class Run:
    text: str              # the prompt as rendered text
    prompt_ids: list[int]  # pagoda's prompt token ids
    tokens: list[int]      # pagoda's greedy tokens
    logprobs: list[dict]   # per step: token id -> pagoda's logprob (its top TOP)
    ref: np.ndarray        # [STEPS, vocab] float32 reference log-softmax, teacher-forced on pagoda's tokens
    ref_emul: np.ndarray   # the same with pagoda's roundings emulated: int8 activation blocks, bf16 K/V


@pytest.fixture(scope="module")
def runs(gguf_path, ref) -> list[Run]:
    from pagoda import LLM, SamplingParams

    # The KV cache dtype named, as the reference emulates it (it is also what "auto" picks for this model).
    llm = LLM(model=str(gguf_path), kv_cache_dtype="bfloat16")
    params = SamplingParams(temperature=0, max_tokens=STEPS, logprobs=TOP, ignore_eos=True)
    outs = llm.generate(PLAIN_PROMPTS, params, use_tqdm=False) + llm.chat(CHATS, params, use_tqdm=False)
    texts = PLAIN_PROMPTS + [chatml(c) for c in CHATS]
    result = []
    for text, out in zip(texts, outs):
        c = out.outputs[0]
        assert len(c.token_ids) == STEPS and len(c.logprobs) == STEPS
        seq = list(out.prompt_token_ids) + list(c.token_ids[:-1])
        start = len(out.prompt_token_ids) - 1
        result.append(Run(text=text, prompt_ids=list(out.prompt_token_ids), tokens=list(c.token_ids),
                          logprobs=[{t: lp.logprob for t, lp in step.items()} for step in c.logprobs],
                          ref=log_softmax(ref.forward(seq, logits_from=start)),
                          ref_emul=log_softmax(ref.forward(seq, act_quant=True, kv_bf16=True, logits_from=start))))
    return result


@dataclasses.dataclass
class Bound:
    worst: float   # on each logprob
    mean: float    # on the mean over all compared logprobs
    margin: float  # on the change of a difference of logprobs, logprob[argmax] - logprob[token]


@pytest.fixture(scope="module")
def bound(runs) -> Bound:
    """How far pagoda's logprobs may be from the float32 reference's, derived from the reference itself.

    pagoda's CPU path differs from float32 arithmetic by two roundings: its kernels, like llama.cpp's, round
    each activation row to int8 per block of 32 before every quantized matmul, and its KV cache stores keys
    and values in bfloat16. The rest (float32 everywhere else, another summation order) adds ~1e-6. So
    measure those roundings, emulated in the reference, on the same teacher-forced tokens against the
    reference without them: over the emulation's top-20 at every step of the 8 prompts (the very entries the
    test checks on pagoda), the largest and the mean change of a logprob, and the largest change of a
    logprob's distance below the float32 argmax's (what decides greedy picks; measured directly, as the two
    logprobs' changes partly cancel). On this 30-layer model the noise grows through the layers to about a
    tenth of a nat on average and more than a nat at the worst step; the int8 rounding is most of it.

    The multiple 2: pagoda's roundings are the same schemes but not bit-identical in their details (SIMD
    paths round ties to even and scale by 127/amax rather than by 1/(amax/127)). The noise is chaotic: such a
    variant of the emulation lands as far from the emulation as both are from float32, so pagoda's deviation
    is a second draw of the same size, not a copy of the measured one. Between such draws the maximum over
    all prompts varied by up to a third, the mean by a few percent, one prompt's maximum by up to 2x; 2x
    covers the draw's fluctuation over all prompts with room, while staying the size of the effect measured
    (a wrong RoPE base already moves the worst logprob by ~5 nats and the mean by ~0.5)."""
    worst, total, count, margin = 0.0, 0.0, 0, 0.0
    for r in runs:
        top = np.argsort(-r.ref_emul, axis=-1)[:, :TOP]
        dev = np.abs(np.take_along_axis(r.ref_emul, top, 1) - np.take_along_axis(r.ref, top, 1))
        worst, total, count = max(worst, float(dev.max())), total + float(dev.sum()), count + dev.size
        best = np.argmax(r.ref, axis=-1)[:, None]
        toks = np.concatenate([top, np.argsort(-r.ref, axis=-1)[:, :TOP]], axis=1)
        below = lambda ls: np.take_along_axis(ls, best, 1) - np.take_along_axis(ls, toks, 1)  # noqa: E731
        margin = max(margin, float(np.abs(below(r.ref_emul) - below(r.ref)).max()))
    return Bound(worst=2.0 * worst, mean=2.0 * total / count, margin=2.0 * margin)


def test_pagoda_prompt_tokens(runs, ref):
    # The prompts pagoda ran spell the texts meant (chat turns rendered as ChatML), so the reference's logits
    # below are of the intended sequences; the France chat has exactly the reference tokenizer's ids.
    for r in runs:
        assert ref.detokenize(r.prompt_ids) == r.text
    assert runs[len(PLAIN_PROMPTS)].prompt_ids == FRANCE_CHAT_IDS


def test_pagoda_logprobs_within_bound(runs, bound, ref):
    worst, total, count = 0.0, 0.0, 0
    for i, r in enumerate(runs):
        for step, (got, want) in enumerate(zip(r.logprobs, r.ref)):
            assert len(got) >= TOP
            for tok, lp in got.items():
                err = abs(lp - want[tok])
                worst, total, count = max(worst, err), total + err, count + 1
                assert err <= bound.worst, (f"prompt {i} step {step} token {tok} ({ref.detokenize([tok])!r}): "
                                            f"pagoda {lp:.4f}, reference {want[tok]:.4f}, bound {bound.worst:.4f}")
            # A token the reference puts more than `bound.worst` above pagoda's lowest reported logprob would
            # have a pagoda logprob above that lowest one (if within the bound), so it must be in pagoda's top.
            floor = min(got.values())
            missing = [t for t in np.flatnonzero(want > floor + bound.worst) if t not in got]
            assert not missing, f"prompt {i} step {step}: tokens {missing} missing from pagoda's top {TOP}"
    print(f"pagoda vs float32 reference: |logprob diff| max {worst:.4f} (bound {bound.worst:.4f}), "
          f"mean {total / count:.4f} (bound {bound.mean:.4f})")
    # The mean, over 5120 entries, is a steadier statistic than the maximum: it catches an error spread
    # thinly over every step (a slightly wrong norm, RoPE base or scale) that stays under `worst`.
    assert total / count <= bound.mean


def test_pagoda_greedy_equals_reference_where_confident(runs, bound, ref):
    # Where the reference's argmax leads every other token by more than `bound.margin`, pagoda must pick it.
    # Teacher-forced, every step is checked; in particular pagoda's greedy text equals the reference's own up
    # to the first step with a smaller lead.
    for i, r in enumerate(runs):
        top2 = np.sort(r.ref, axis=-1)[:, -2:]
        lead = top2[:, 1] - top2[:, 0]
        checked = 0
        for step, tok in enumerate(r.tokens):
            if lead[step] > bound.margin:
                want = int(np.argmax(r.ref[step]))
                assert tok == want, (f"prompt {i} step {step}: pagoda {tok} ({ref.detokenize([tok])!r}), reference "
                                     f"{want} ({ref.detokenize([want])!r}), lead {lead[step]:.3f}, "
                                     f"bound {bound.margin:.3f}")
                checked += 1
        # Not vacuous: each prompt has steps the bound decides.
        assert checked > 0, f"prompt {i}: no step leads by more than {bound.margin:.3f}"
