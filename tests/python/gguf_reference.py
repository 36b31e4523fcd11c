"""An independent float32 numpy reference of the llama forward pass, read straight from a GGUF file.

Weights are dequantized with gguf-py (PyPI `gguf`: GGUFReader, quants.dequantize) and kept in GGUF's own
layout: llama.cpp's converter permuted the rows of attn_q / attn_k so that RoPE rotates adjacent pairs
(x[2i], x[2i+1]) -- llama.cpp's "normal" RoPE -- instead of HF's halves (x[i], x[i + d/2]). This file applies
that adjacent-pair RoPE to the rows as stored, so a test comparing it with pagoda (which un-permutes the
rows at load time and rotates halves) checks the un-permutation independently. Hyperparameters (RMSNorm
eps, RoPE base, head counts for GQA) come from the file's `llama.*` metadata; with no `output.weight` the
output projection is the tied token embedding.

`act_quant=True` emulates what llama.cpp does before every matmul with a quantized weight (and what
pagoda's CPU kernels do, following it): the activation row is quantized per block of 32 to int8 with one
fp16 scale (Q8_0; Q8_1 for Q4_1/Q5_1 weights, which also stores the block's scaled sum in fp16 to apply the
weight block's min). `kv_bf16=True` rounds keys (after RoPE) and values to bfloat16, as a KV cache of that
dtype stores them. Tests run the float32 reference against itself with and without these roundings to
measure how far they move the logits, and derive their tolerance for pagoda from that.

The token ids are the caller's; `detokenize` turns ids back into text through the GGUF vocabulary (GPT-2
byte-level pieces) so tests can check hard-coded ids against the text they stand for.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT


def smollm2_gguf() -> pathlib.Path | None:
    """The built-in model's file, SmolLM2-135M-Instruct Q4_1, in pagoda's model cache (fetched by
    scripts/fetch-models.sh), or None when it is not there."""
    from pagoda import _core  # only to find the file; the reference itself uses gguf-py and numpy
    try:
        return pathlib.Path(_core.builtin_model_file("smollm2:135m"))
    except ValueError:
        return None


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


@dataclasses.dataclass
class _Linear:
    """One weight matrix y = x @ w.T: w [rows, cols] float32 dequantized; for Q4_1 / Q5_1 also the per-block
    mins [rows, cols / 32], which the Q8_1 path needs to reproduce ggml's use of the activation block sum."""
    w: np.ndarray
    qtype: QT
    mins: np.ndarray | None = None


def _load_linear(tensors: list) -> _Linear:
    """Dequantizes one or more GGUF matrices of one type and stacks their rows (q|k|v, gate|up)."""
    qtype = tensors[0].tensor_type
    assert all(t.tensor_type == qtype for t in tensors)
    w = np.concatenate([gguf.quants.dequantize(t.data, qtype) for t in tensors]).astype(np.float32, copy=False)
    mins = None
    if qtype in (QT.Q4_1, QT.Q5_1):
        # Both formats start each block with fp16 d, then fp16 m (the block's min).
        block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
        mins = np.concatenate([np.ascontiguousarray(t.data.reshape(t.data.shape[0], -1, block_bytes)[:, :, 2:4])
                               .view(np.float16)[..., 0] for t in tensors]).astype(np.float32)
    return _Linear(w=np.ascontiguousarray(w), qtype=qtype, mins=mins)


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf, which ggml's reference quantizers use (numpy's round goes to even on ties)."""
    return np.copysign(np.floor(np.abs(v) + np.float32(0.5)), v)


def quantize_q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_0/q8_1 reference on the last axis of x (a multiple of 32): per block of 32,
    d = amax / 127, q = roundf(x / d) in [-127, 127] (scaled by 1/d computed from the float d), d stored as
    fp16, and (Q8_1) s = fp16(d * sum(q)). Returns (q [..., nb, 32] float32, d16 [..., nb], s16 [..., nb])
    with d16 and s16 already widened back to float32."""
    xb = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32, copy=False)
    d = np.abs(xb).max(axis=-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = _round_half_away(xb * inv[..., None])
    d16 = d.astype(np.float16).astype(np.float32)
    s16 = (d * q.sum(axis=-1)).astype(np.float16).astype(np.float32)
    return q, d16, s16


def _matmul(x: np.ndarray, lin: _Linear, act_quant: bool) -> np.ndarray:
    """x [n, cols] @ w.T -> [n, rows]. With act_quant, x goes through the int8 block quantization ggml pairs
    with the weight type first; the product of the dequantized values equals ggml's integer block sums times
    the two scales (up to float32 summation order), plus, for Q4_1/Q5_1, min * s with ggml's fp16 s rather
    than d16 * sum(q)."""
    if not act_quant or lin.qtype in (QT.F32, QT.F16, QT.BF16):
        return x @ lin.w.T
    q, d16, s16 = quantize_q8_blocks(x)
    xq = (q * d16[..., None]).reshape(x.shape)
    y = xq @ lin.w.T
    if lin.mins is not None:
        y += (s16 - d16 * q.sum(axis=-1)) @ lin.mins.T
    return y


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even) -> float32. PRECOND: x finite."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


@dataclasses.dataclass
class _Layer:
    attn_norm: np.ndarray
    qkv: _Linear
    out: _Linear
    ffn_norm: np.ndarray
    gate_up: _Linear
    down: _Linear


class KvCache:
    """Keys (after RoPE) and values of the positions run so far: per layer [n_kv_heads, positions, head_dim]."""

    def __init__(self, n_layers: int):
        self.k: list[np.ndarray | None] = [None] * n_layers
        self.v: list[np.ndarray | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[1]


class GgufLlama:
    """The llama forward pass of a GGUF file (architecture `llama`) in float32."""

    def __init__(self, path: str | os.PathLike):
        reader = gguf.GGUFReader(path)
        arch = _field(reader, "general.architecture")
        if arch != "llama":
            raise ValueError(f"{path}: architecture {arch!r}, this reference runs llama only")
        self.n_layers = int(_field(reader, "llama.block_count"))
        self.dim = int(_field(reader, "llama.embedding_length"))
        self.n_heads = int(_field(reader, "llama.attention.head_count"))
        self.n_kv_heads = int(_field(reader, "llama.attention.head_count_kv", self.n_heads))
        self.head_dim = self.dim // self.n_heads
        self.eps = float(_field(reader, "llama.attention.layer_norm_rms_epsilon"))
        self.rope_base = float(_field(reader, "llama.rope.freq_base", 10000.0))
        rope_dims = int(_field(reader, "llama.rope.dimension_count", self.head_dim))
        if rope_dims != self.head_dim or _field(reader, "llama.rope.scaling.type") not in (None, "none"):
            raise ValueError(f"{path}: partial or scaled RoPE is not implemented in this reference")
        self.tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
        self.eos_token_id = int(_field(reader, "tokenizer.ggml.eos_token_id"))

        # name -> gguf ReaderTensor (its .data a view of the memory-mapped file, as stored)
        self.tensors = tensors = {t.name: t for t in reader.tensors}
        embd = tensors["token_embd.weight"]
        # The embedding lookup dequantizes rows exactly; as the tied output projection the same matrix is a
        # quantized matmul weight (and is paired with Q8_0 activations like any other).
        self.embed = _load_linear([embd])
        self.output = _load_linear([tensors["output.weight"]]) if "output.weight" in tensors else self.embed
        norm = tensors["output_norm.weight"]
        self.output_norm = gguf.quants.dequantize(norm.data, norm.tensor_type).astype(np.float32)
        self.vocab_size = self.output.w.shape[0]
        self.layers = []
        for i in range(self.n_layers):
            t = lambda name: tensors[f"blk.{i}.{name}.weight"]  # noqa: E731
            norm = lambda name: gguf.quants.dequantize(t(name).data, t(name).tensor_type).astype(np.float32)  # noqa
            self.layers.append(_Layer(
                attn_norm=norm("attn_norm"),
                qkv=_load_linear([t("attn_q"), t("attn_k"), t("attn_v")]),
                out=_load_linear([t("attn_output")]),
                ffn_norm=norm("ffn_norm"),
                gate_up=_load_linear([t("ffn_gate"), t("ffn_up")]),
                down=_load_linear([t("ffn_down")]),
            ))
        q_rows, kv_rows = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        assert self.layers[0].qkv.w.shape == (q_rows + 2 * kv_rows, self.dim)
        # theta_i = base^(-2i/d) for the pair (2i, 2i+1), computed in float64 and rounded once.
        self._inv_freq = self.rope_base ** (-np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim)

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """llama.cpp's normal (adjacent-pair) RoPE on x [heads, n, head_dim] at positions [n]."""
        ang = positions[:, None].astype(np.float64) * self._inv_freq[None, :]
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def forward(self, ids, cache: KvCache | None = None, act_quant: bool = False, kv_bf16: bool = False,
                logits_from: int = 0) -> np.ndarray:
        """Runs the tokens `ids` after the positions already in `cache` (appending to it) and returns the
        float32 logits [len(ids) - logits_from, vocab] of the positions from logits_from on. A cache is run
        with one kv_bf16 setting throughout."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        cache = cache if cache is not None else KvCache(self.n_layers)
        start = cache.length
        positions = np.arange(start, start + n)
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv_heads
        group = nh // nkv
        scale = np.float32(1.0 / np.sqrt(hd))
        # Causal mask over [n new, start + n all] positions.
        mask = np.where(np.arange(start + n)[None, :] > positions[:, None], np.float32(-np.inf), np.float32(0))

        x = self.embed.w[ids]
        for li, layer in enumerate(self.layers):
            h = _rms_norm(x, layer.attn_norm, self.eps)
            qkv = _matmul(h, layer.qkv, act_quant)
            q = qkv[:, : nh * hd].reshape(n, nh, hd).transpose(1, 0, 2)
            k = qkv[:, nh * hd: (nh + nkv) * hd].reshape(n, nkv, hd).transpose(1, 0, 2)
            v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd).transpose(1, 0, 2)
            q, k = self._rope(q, positions), self._rope(k, positions)
            if kv_bf16:
                k, v = round_bf16(k), round_bf16(v)
            if cache.k[li] is not None:
                k = np.concatenate([cache.k[li], k], axis=1)
                v = np.concatenate([cache.v[li], v], axis=1)
            cache.k[li], cache.v[li] = k, v
            # GQA: query head j reads KV head j // group.
            qg = q.reshape(nkv, group * n, hd)
            s = (qg @ k.transpose(0, 2, 1)).reshape(nkv, group, n, -1) * scale + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            p = s / s.sum(axis=-1, keepdims=True)
            o = (p.reshape(nkv, group * n, -1) @ v).reshape(nh, n, hd).transpose(1, 0, 2).reshape(n, nh * hd)
            x = x + _matmul(o, layer.out, act_quant)
            h = _rms_norm(x, layer.ffn_norm, self.eps)
            gu = _matmul(h, layer.gate_up, act_quant)
            g, u = gu[:, : gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
            x = x + _matmul(g / (np.float32(1) + np.exp(-g)) * u, layer.down, act_quant)
        h = _rms_norm(x[logits_from:], self.output_norm, self.eps)
        return _matmul(h, self.output, act_quant)

    def greedy(self, prompt_ids, max_tokens: int, act_quant: bool = False, kv_bf16: bool = False,
               stop_at_eos: bool = True):
        """Greedy continuation: (token ids, logits [steps, vocab] of each step)."""
        cache = KvCache(self.n_layers)
        logits = self.forward(prompt_ids, cache, act_quant, kv_bf16, logits_from=len(prompt_ids) - 1)
        out, steps = [], []
        for _ in range(max_tokens):
            steps.append(logits[-1])
            tok = int(np.argmax(logits[-1]))
            out.append(tok)
            if stop_at_eos and tok == self.eos_token_id:
                break
            logits = self.forward([tok], cache, act_quant, kv_bf16)
        return out, np.stack(steps)

    def detokenize(self, ids) -> str:
        """The text of ids through the vocabulary's GPT-2 byte-level pieces (special tokens as their text)."""
        return b"".join(_piece_bytes(self.tokens[i]) for i in ids).decode("utf-8", errors="replace")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-character table, inverted."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _byte_decoder()


def _piece_bytes(piece: str) -> bytes:
    if all(ch in _BYTE_DECODER for ch in piece):
        return bytes(_BYTE_DECODER[ch] for ch in piece)
    return piece.encode("utf-8")  # a special token such as <|im_start|>, written as itself


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-softmax over the last axis."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
