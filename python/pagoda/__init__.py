"""pagoda: an LLM inference engine in C++ with vLLM's offline Python API.

    from pagoda import LLM, SamplingParams
    llm = LLM(model="path/to/hf-model")          # or a hub repo id, or "dummy:tiny"
    for out in llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32)):
        print(out.outputs[0].text)

Attention configuration as in vLLM: ``pagoda.config.AttentionConfig`` and
``pagoda.v1.attention.backends.registry.AttentionBackendEnum``.
"""

from . import _core
from .logger import init_logger  # configures the `pagoda` logger and receives the engine's lines
from .inputs import PromptType, TextPrompt, TokensPrompt
from .logprobs import Logprob
from .outputs import CompletionOutput, EmbeddingOutput, EmbeddingRequestOutput, RequestOutput
from .sampling_params import RequestOutputKind, SamplingParams
from .entrypoints.llm import LLM

__version__ = _core.__version__

__all__ = [
    "__version__",
    "LLM",
    "SamplingParams",
    "RequestOutputKind",
    "RequestOutput",
    "CompletionOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "Logprob",
    "PromptType",
    "TextPrompt",
    "TokensPrompt",
    "init_logger",
]
