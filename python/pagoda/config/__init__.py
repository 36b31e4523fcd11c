"""vLLM's ``vllm.config``: the configuration classes the Python API takes."""

from .attention import AttentionConfig

__all__ = ["AttentionConfig"]
