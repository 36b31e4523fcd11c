"""vLLM's ``vllm.logprobs``: the log probability of a token, its rank and text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """``logprob`` under the model's raw distribution (before penalties and temperature, as vLLM's default
    ``logprobs_mode``); ``rank`` 1 is the most likely token (None when the token is outside the top
    ``logprobs`` alternatives: pagoda's engine does not rank the whole vocabulary)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


PromptLogprobs = List[Optional[Dict[int, Logprob]]]
SampleLogprobs = List[Dict[int, Logprob]]
