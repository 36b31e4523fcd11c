"""vLLM's ``vllm.sampling_params``: SamplingParams, with vLLM's field names and defaults.

Values are checked when the object is made, by the engine's own sampler (the texts ``pagoda generate``
prints). Fields that vLLM has and pagoda's engine does not run are accepted at their neutral value only
(e.g. ``min_tokens=0``, ``prompt_logprobs=None``); any other value raises ValueError naming the field.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, fields
from typing import Any, List, Optional, Union

from . import _core


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


# Fields pagoda accepts only at these values: (field, is neutral, what to say).
_NEUTRAL_ONLY = (
    ("min_tokens", lambda v: v == 0, "0"),
    ("prompt_logprobs", lambda v: v is None, "None"),
    ("include_stop_str_in_output", lambda v: not v, "False"),
    ("spaces_between_special_tokens", lambda v: bool(v), "True"),
    ("logits_processors", lambda v: not v, "None"),
    ("logit_bias", lambda v: not v, "None"),
    ("allowed_token_ids", lambda v: v is None, "None"),
    ("bad_words", lambda v: not v, "None"),
    ("structured_outputs", lambda v: v is None, "None"),
    ("guided_decoding", lambda v: v is None, "None"),
)


@dataclass
class SamplingParams:
    """How to sample a completion (vLLM's SamplingParams).

    temperature 0 is greedy. ``seed`` makes a request's sampling reproducible whatever batch it runs in;
    without one, the LLM's ``seed`` and the request's number give each request its own stream.
    ``max_tokens=None`` generates up to the context length. ``logprobs=k`` returns, per generated token, the
    log probabilities of the sampled token and of the k most likely ones (``0``: the sampled token only).
    """

    n: int = 1
    best_of: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Union[None, str, List[str]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logits_processors: Optional[Any] = None
    include_stop_str_in_output: bool = False
    truncate_prompt_tokens: Optional[int] = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: Optional[Any] = None
    guided_decoding: Optional[Any] = None
    logit_bias: Optional[Any] = None
    allowed_token_ids: Optional[List[int]] = None
    extra_args: Optional[dict] = None
    bad_words: Optional[List[str]] = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        else:
            self.stop = list(self.stop)
        self.stop_token_ids = [] if self.stop_token_ids is None else list(self.stop_token_ids)
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError(f"best_of must be None or equal to n in pagoda, got best_of={self.best_of}, n={self.n}.")
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}.")
        t = self.truncate_prompt_tokens
        if t is not None and not (t == -1 or t >= 1):
            raise ValueError(f"truncate_prompt_tokens must be >= 1 or -1, got {self.truncate_prompt_tokens}")
        for name, neutral, value in _NEUTRAL_ONLY:
            if not neutral(getattr(self, name)):
                raise ValueError(f"SamplingParams.{name} is not supported by pagoda's engine yet; leave it at {value}.")
        self._engine_request(seed=0).check()

    def _engine_request(self, seed: int) -> "_core.Request":
        """The engine's request parameters (prompt ids and max_tokens are set by the caller)."""
        r = _core.Request()
        r.temperature = float(self.temperature)
        r.top_k = int(self.top_k)
        r.top_p = float(self.top_p)
        r.min_p = float(self.min_p)
        r.repetition_penalty = float(self.repetition_penalty)
        r.presence_penalty = float(self.presence_penalty)
        r.frequency_penalty = float(self.frequency_penalty)
        r.seed = seed & 0xFFFFFFFFFFFFFFFF
        r.logprobs = self.logprobs
        r.max_tokens = 0 if self.max_tokens is None else int(self.max_tokens)
        r.stop = list(self.stop)  # type: ignore[arg-type]
        r.stop_token_ids = list(self.stop_token_ids)  # type: ignore[arg-type]
        r.ignore_eos = bool(self.ignore_eos)
        r.skip_special_tokens = bool(self.skip_special_tokens)
        r.detokenize = bool(self.detokenize)
        return r

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    @classmethod
    def from_optional(cls, **kwargs: Any) -> "SamplingParams":
        """vLLM's: like SamplingParams(**kwargs), with None meaning the default."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kwargs.items() if v is not None and k in names})


__all__ = ["SamplingParams", "RequestOutputKind"]
