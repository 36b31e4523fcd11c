"""vLLM's ``vllm.config.attention``: AttentionConfig, the fields of spec §9.1.

The engine validates the fields (spec §9.2) when the object is made, with the texts of the CLI's
``--attention-config``: ``AttentionConfig(flash_attn_version=5)`` raises ValueError
``1 validation error for AttentionConfig\\nflash_attn_version\\n  Input should be 2, 3 or 4``. Values are
typed leniently as there (``"true"``, ``1``, ``"16"``) and stored normalised; backend names become
AttentionBackendEnum members.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from .. import _core
from ..v1.attention.backends.registry import AttentionBackendEnum

BackendLike = Union[AttentionBackendEnum, str, None]


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


def _not_json(value: Any) -> Any:
    # A value JSON cannot carry reaches the engine as a list, which no field accepts, so the engine reports
    # the field's own "Input should be ..." text.
    return [repr(value)]


class AttentionConfig:
    """Attention backend selection and backend options (spec §9.1). Unset fields keep their defaults."""

    backend: Optional[AttentionBackendEnum]
    backend_per_kind: Dict[str, Optional[AttentionBackendEnum]]
    flash_attn_version: Optional[int]
    use_prefill_decode_attention: bool
    flash_attn_max_num_splits_for_cuda_graph: int
    use_trtllm_attention: Optional[bool]
    disable_flashinfer_q_quantization: bool
    use_non_causal: bool
    flex_attn_block_m: Optional[int]
    flex_attn_block_n: Optional[int]
    tq_max_kv_splits_for_cuda_graph: int
    use_cascade_attention: bool

    def __init__(
        self,
        backend: BackendLike = _UNSET,
        backend_per_kind: Optional[Dict[str, BackendLike]] = _UNSET,
        flash_attn_version: Optional[int] = _UNSET,
        use_prefill_decode_attention: bool = _UNSET,
        flash_attn_max_num_splits_for_cuda_graph: int = _UNSET,
        use_trtllm_attention: Optional[bool] = _UNSET,
        disable_flashinfer_q_quantization: bool = _UNSET,
        use_non_causal: bool = _UNSET,
        flex_attn_block_m: Optional[int] = _UNSET,
        flex_attn_block_n: Optional[int] = _UNSET,
        tq_max_kv_splits_for_cuda_graph: int = _UNSET,
        use_cascade_attention: bool = _UNSET,
    ) -> None:
        given = {name: value for name, value in locals().items() if name != "self" and value is not _UNSET}
        self._set(json.loads(_core.parse_attention_config(json.dumps(given, default=_not_json))))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "AttentionConfig":
        """Validates a mapping in its own key order (the first failure is reported, as for the CLI's JSON)."""
        c = cls.__new__(cls)
        c._set(json.loads(_core.parse_attention_config(json.dumps(dict(d), default=_not_json))))
        return c

    def _set(self, fields: Dict[str, Any]) -> None:
        for name, value in fields.items():
            if name == "backend":
                value = None if value is None else AttentionBackendEnum(value)
            elif name == "backend_per_kind":
                value = {k: None if v == "auto" else AttentionBackendEnum(v) for k, v in value.items()}
            object.__setattr__(self, name, value)

    def to_dict(self) -> Dict[str, Any]:
        """Every field, as JSON would carry it (backends by name; a per-kind None is "auto")."""
        d: Dict[str, Any] = {}
        for name in _field_names():
            value = getattr(self, name)
            if name == "backend":
                value = None if value is None else value.value
            elif name == "backend_per_kind":
                value = {k: "auto" if v is None else v.value for k, v in value.items()}
            d[name] = value
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttentionConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "AttentionConfig(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _field_names()) + ")"


def _field_names() -> list:
    return list(json.loads(_core.parse_attention_config("{}")).keys())


__all__ = ["AttentionConfig"]
