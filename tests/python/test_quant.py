"""The GGML block formats: pagoda's dequantization of every type against gguf-py's (llama.cpp's own Python
reader, PyPI `gguf`) bit for bit, and pagoda's quantizer read back by gguf-py."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from pagoda import _core

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# Byte offsets of each block's fp16 scales (d, and m / dmin where the type has one).
HALF_OFFSETS = {"Q4_0": [0], "Q5_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2],
                "Q5_K": [0, 2], "Q6_K": [208]}


def random_blocks(name: str, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """[n_blocks, type_size] random bytes whose fp16 scales are finite (any other value: normal, subnormal, 0)."""
    _, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in HALF_OFFSETS[name]:
        bits = rng.integers(0, 0x10000, size=n_blocks, dtype=np.uint32)
        exponent = (bits >> 10) & 0x1F
        bits = np.where(exponent == 0x1F, bits & ~np.uint32(0x4000), bits).astype("<u2")  # 31 -> 15: finite
        blocks[:, off:off + 2] = bits.view(np.uint8).reshape(n_blocks, 2)
    return blocks


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_matches_gguf_py_bit_for_bit(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    qtype = gguf.GGMLQuantizationType[name]
    block_size, _ = gguf.GGML_QUANT_SIZES[qtype]
    blocks = random_blocks(name, 4096 if block_size == 32 else 512, rng)
    n = blocks.shape[0] * block_size
    ours = np.frombuffer(_core.dequantize(name, blocks.tobytes(), n), dtype="<f4")
    ref = gguf.quants.dequantize(blocks, qtype).reshape(-1)
    assert ref.dtype == np.float32 and ours.shape == ref.shape
    mismatch = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert mismatch.size == 0, f"{name}: {mismatch.size} elements differ, first {mismatch[0]}: " \
                               f"{ours[mismatch[0]]!r} vs {ref[mismatch[0]]!r}"


def element_steps(name: str, blocks: np.ndarray) -> np.ndarray:
    """The grid step of every weight: the block's d, or d * (sub-block scale) for the k-quants."""
    d = blocks[:, [0, 1]].copy().view("<f2").astype(np.float64) if name != "Q6_K" else \
        blocks[:, [208, 209]].copy().view("<f2").astype(np.float64)
    if name in ("Q4_K", "Q5_K"):
        sc, _ = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())
        return np.repeat(np.abs(d) * sc.astype(np.float64), 32, axis=1).reshape(-1)
    if name == "Q6_K":
        sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float64)
        return np.repeat(np.abs(d) * np.abs(sc), 16, axis=1).reshape(-1)
    return np.repeat(np.abs(d), 32, axis=1).reshape(-1)


@pytest.mark.parametrize("name", TYPES)
def test_quantize_reads_back_in_gguf_py_within_a_step(name):
    """gguf-py decodes pagoda's blocks to pagoda's values, each within half a grid step of the input (a whole
    step for Q4_0/Q5_0, whose grid ends one code short on the positive side), plus float32 rounding."""
    rng = np.random.default_rng(7)
    qtype = gguf.GGMLQuantizationType[name]
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    x = (rng.standard_normal(256 * 64) * np.repeat(2.0 ** rng.integers(-8, 6, 64), 256)).astype(np.float32)
    data = _core.quantize(name, x.tobytes(), x.size)
    blocks = np.frombuffer(data, dtype=np.uint8).reshape(-1, type_size)
    back = gguf.quants.dequantize(blocks, qtype).reshape(-1)
    assert np.array_equal(back.view(np.uint32), np.frombuffer(_core.dequantize(name, data, x.size), "<u4"))
    fraction = 1.0 if name in ("Q4_0", "Q5_0") else 0.5
    err = np.abs(back.astype(np.float64) - x)
    bound = fraction * element_steps(name, blocks) + 2.0 ** -21 * (np.abs(x) + np.abs(back))
    assert np.all(err <= bound), f"{name}: worst excess {np.max(err - bound)}"


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="unknown quantized type 'Q3_K'"):
        _core.dequantize("Q3_K", b"", 0)
    with pytest.raises(ValueError, match="not a whole number of Q4_K blocks"):
        _core.dequantize("Q4_K", bytes(144), 128)
    with pytest.raises(ValueError, match="not a whole number"):
        _core.quantize("Q8_0", b"", -32)
    with pytest.raises(ValueError, match="take 36 bytes, not 35"):
        _core.dequantize("Q4_0", bytes(35), 64)
    with pytest.raises(ValueError, match="take 128 bytes, not 4"):
        _core.quantize("Q4_1", bytes(4), 32)
    with pytest.raises(ValueError, match="finite"):
        _core.quantize("Q8_0", np.full(32, np.inf, dtype=np.float32).tobytes(), 32)
    assert _core.dequantize("Q6_K", b"", 0) == b""
