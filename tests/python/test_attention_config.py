"""AttentionConfig and AttentionBackendEnum: the fields, defaults and names of the engine, and every
validation error with the exact text the CLI prints for the same value (spec §8, §9.2)."""

from __future__ import annotations

import json

import pytest

from pagoda import LLM, _core
from pagoda.config import AttentionConfig
from pagoda.v1.attention.backends.registry import AttentionBackendEnum

from conftest import cli_error, run_cli

SPEC_NAMES = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT", "CPU_ATTN"]


def test_enum_has_every_backend():
    assert [m.name for m in AttentionBackendEnum] == SPEC_NAMES == _core.backend_names()
    assert AttentionBackendEnum.FLASH_ATTN == "FLASH_ATTN" and AttentionBackendEnum["CPU_ATTN"].value == "CPU_ATTN"


def test_fields_and_defaults_are_the_engines():
    engine = json.loads(_core.parse_attention_config("{}"))
    assert AttentionConfig().to_dict() == engine
    assert list(AttentionConfig.__init__.__code__.co_varnames[1:1 + len(engine)]) == list(engine)
    assert list(AttentionConfig.__annotations__) == list(engine)


def test_values_are_normalised():
    c = AttentionConfig(backend="flash_attn", flash_attn_version=3, use_prefill_decode_attention="yes",
                        flex_attn_block_m="16", backend_per_kind={"sliding_window": "auto", "full_attention": "triton_attn"})
    assert c.backend is AttentionBackendEnum.FLASH_ATTN
    assert c.flash_attn_version == 3 and c.use_prefill_decode_attention is True and c.flex_attn_block_m == 16
    assert c.backend_per_kind == {"sliding_window": None, "full_attention": AttentionBackendEnum.TRITON_ATTN}
    assert AttentionConfig(backend="auto").backend is None
    assert AttentionConfig(backend=AttentionBackendEnum.FLASHINFER) == AttentionConfig.from_dict({"backend": "FLASHINFER"})


# Each case: AttentionConfig keyword arguments (also given to the CLI as --attention-config JSON).
INVALID = [
    {"flash_attn_version": 5},
    {"flash_attn_version": "3"},
    {"flash_attn_version": 3.5},
    {"backend": "TORCH_SDPA"},
    {"backend": "flashmla"},
    {"backend": 3},
    {"backend_per_kind": {"bogus_kind": "FLASH_ATTN"}},
    {"backend_per_kind": {"full_attention": "NOPE"}},
    {"backend_per_kind": {"sliding_window": 7}},
    {"backend_per_kind": "FLASH_ATTN"},
    {"use_prefill_decode_attention": "maybe"},
    {"use_prefill_decode_attention": 2},
    {"flash_attn_max_num_splits_for_cuda_graph": "abc"},
    {"flash_attn_max_num_splits_for_cuda_graph": True},
    {"flash_attn_max_num_splits_for_cuda_graph": 1.5},
    {"use_trtllm_attention": "sometimes"},
    {"disable_flashinfer_q_quantization": [1]},
    {"use_non_causal": None},
    {"flex_attn_block_m": "sixteen"},
    {"flex_attn_block_n": {"a": 1}},
    {"tq_max_kv_splits_for_cuda_graph": "1e3"},
]


def cli_attention_error(pagoda_bin, *args) -> str:
    r = run_cli(pagoda_bin, "backends", "select", "--device", "cpu", "--json", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    return json.loads(r.stdout)["error"]


@pytest.mark.parametrize("fields", INVALID, ids=[json.dumps(c) for c in INVALID])
def test_validation_error_is_the_clis(fields, pagoda_bin):
    want = cli_attention_error(pagoda_bin, "--attention-config", json.dumps(fields))
    with pytest.raises(ValueError) as e:
        AttentionConfig(**fields)
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        AttentionConfig.from_dict(fields)
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:  # fails before any model is loaded
        LLM(model="dummy:tiny", attention_config=fields)
    assert str(e.value) == want


def test_extra_field_is_the_clis_error(pagoda_bin):
    fields = {"disable_flashinfer_prefill": True}
    want = cli_attention_error(pagoda_bin, "--attention-config", json.dumps(fields))
    assert want == "1 validation error for AttentionConfig\ndisable_flashinfer_prefill\n  Extra inputs are not permitted"
    with pytest.raises(ValueError) as e:
        AttentionConfig.from_dict(fields)
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        LLM(model="dummy:tiny", attention_config=fields)
    assert str(e.value) == want
    with pytest.raises(TypeError):
        AttentionConfig(disable_flashinfer_prefill=True)  # a Python signature: an unknown keyword


def test_attention_backend_errors_are_the_clis(pagoda_bin):
    want = cli_attention_error(pagoda_bin, "--attention-backend", "bogus")
    assert want == ("Unknown attention backend: 'BOGUS'. Valid options are: FLASH_ATTN, FLASHINFER, TRITON_ATTN, "
                    "FLEX_ATTENTION, TURBOQUANT, CPU_ATTN")
    with pytest.raises(ValueError) as e:
        LLM(model="dummy:tiny", attention_backend="bogus")
    assert str(e.value) == want
    want = cli_attention_error(pagoda_bin, "--attention-backend", "FLASH_ATTN", "-ac.backend", "FLASHINFER")
    assert want == "attention_backend and attention_config.backend are mutually exclusive"
    for config in (AttentionConfig(backend="FLASHINFER"), {"backend": "FLASHINFER"}):
        with pytest.raises(ValueError) as e:
            LLM(model="dummy:tiny", attention_backend=AttentionBackendEnum.FLASH_ATTN, attention_config=config)
        assert str(e.value) == want
