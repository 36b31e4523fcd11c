"""vLLM's ``vllm.inputs``: the prompt forms LLM.generate() accepts besides plain strings."""

from __future__ import annotations

from typing import List, TypedDict, Union


class TextPrompt(TypedDict):
    """A text prompt; it is tokenized with the model's tokenizer (BOS added as the tokenizer says)."""

    prompt: str


class _TokensPromptIds(TypedDict):
    prompt_token_ids: List[int]


class TokensPrompt(_TokensPromptIds, total=False):
    """A prompt given as token ids (nothing is added); ``prompt``, when given, is only echoed in the output."""

    prompt: str


SingletonPrompt = Union[str, TextPrompt, TokensPrompt]
PromptType = SingletonPrompt

__all__ = ["TextPrompt", "TokensPrompt", "PromptType", "SingletonPrompt"]
