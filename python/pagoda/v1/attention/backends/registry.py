"""vLLM's ``vllm.v1.attention.backends.registry``: AttentionBackendEnum, one member per attention backend
pagoda knows (spec §1.1), made from the engine's own list so that the two cannot disagree.

Members are ``str`` enums whose value is the name (``AttentionBackendEnum.FLASH_ATTN == "FLASH_ATTN"``), so
they go wherever a backend name goes: ``LLM(attention_backend=...)``, ``AttentionConfig(backend=...)``, JSON.
"""

from __future__ import annotations

import enum

from .... import _core


class _AttentionBackendEnumBase(str, enum.Enum):
    def get_path(self) -> str:
        """vLLM returns the backend class's import path; pagoda's backends are C++, named by the enum name."""
        return self.value


AttentionBackendEnum = _AttentionBackendEnumBase(  # type: ignore[call-overload]
    "AttentionBackendEnum", [(name, name) for name in _core.backend_names()], module=__name__)

__all__ = ["AttentionBackendEnum"]
