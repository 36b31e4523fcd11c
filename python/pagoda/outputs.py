"""vLLM's ``vllm.outputs``: what LLM.generate() and LLM.chat() return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Union

from .logprobs import PromptLogprobs, SampleLogprobs


@dataclass
class CompletionOutput:
    """One completion of a request (SamplingParams.n gives several, ``index`` 0 to n-1).

    ``finish_reason`` is "stop" (EOS, a stop string or a stop token) or "length"; ``stop_reason`` is the stop
    string or stop token id that ended it, None for EOS and length. ``cumulative_logprob`` and ``logprobs``
    are None unless SamplingParams.logprobs was given.
    """

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """A request's prompt and its completions. ``prompt`` is None for a prompt given as token ids."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: Optional[List[int]]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: Optional[str] = None
    encoder_prompt_token_ids: Optional[List[int]] = None
    num_cached_tokens: Optional[int] = None
    multi_modal_placeholders: dict = field(default_factory=dict)
    kv_transfer_params: Optional[dict] = None


@dataclass
class EmbeddingOutput:
    """vLLM's EmbeddingOutput: the pooled (and, as the model says, normalized) vector."""

    embedding: List[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    """vLLM's EmbeddingRequestOutput, what LLM.embed() returns per prompt."""

    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: List[int]
    finished: bool = True
