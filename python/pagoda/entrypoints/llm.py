"""vLLM's ``vllm.entrypoints.llm``: LLM, offline generation over pagoda's C++ engine.

LLM(...) takes every option of ``pagoda generate`` under its name with underscores (``max_model_len=512``
is ``--max-model-len 512``): the arguments become that command line and go through the CLI's own parser,
config files and checks, so errors are the CLI's (ValueError for configuration, RuntimeError for failures
at run time such as a backend that cannot run). The engine then starts exactly as ``pagoda generate``
starts it, with the same log lines (through the ``pagoda`` logger).
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .. import _core
from .._progress import Progress
from ..config.attention import AttentionConfig
from ..inputs import PromptType
from ..logger import logger
from ..logprobs import Logprob
from ..outputs import CompletionOutput, EmbeddingOutput, EmbeddingRequestOutput, RequestOutput
from ..sampling_params import SamplingParams
from ..tokenizer import Conversation, Tokenizer, render_chat
from ..v1.attention.backends.registry import AttentionBackendEnum

# vLLM arguments with no meaning in pagoda, accepted at any value (a WARNING says so when not the default).
_IGNORED = {
    "trust_remote_code": False,  # pagoda runs no model code from the hub
    "swap_space": 4,  # pagoda preempts by recomputation, not by swapping to CPU memory
    "disable_log_stats": False,
    "disable_custom_all_reduce": False,
    "disable_async_output_proc": False,
    "max_seq_len_to_capture": 8192,
    "compilation_config": None,
}
# vLLM arguments pagoda accepts at one value only: (neutral value, why).
_NEUTRAL_ONLY = {
    "tensor_parallel_size": (1, "pagoda runs a model on one device"),
    "pipeline_parallel_size": (1, "pagoda runs a model on one device"),
    "data_parallel_size": (1, "pagoda runs a model on one device"),
    "quantization": (None, "pagoda loads unquantized (float32/bfloat16/float16) checkpoints"),
    "cpu_offload_gb": (0, "pagoda does not offload weights"),
    "enable_lora": (False, "pagoda has no LoRA support"),
    "hf_overrides": (None, "pagoda reads config.json as it is"),
    "tokenizer_revision": (None, "the tokenizer comes from the model's revision"),
    "tokenizer_mode": ("auto", "pagoda has one tokenizer implementation"),
}
# vLLM arguments pagoda accepts at these values only: (accepted values, why).
_ONE_OF = {
    "runner": (("auto", "generate"), "pagoda runs generative models (no pooling runner yet)"),
    "convert": (("auto", "none"), "pagoda converts no model into another task"),
}
# Config files are expanded by the CLI's argument pipeline, not declared as engine options.
_FILE_OPTIONS = ("config", "json_config")

Prompts = Union[PromptType, Sequence[PromptType], Sequence[int], Sequence[Sequence[int]]]


def _option_value(name: str, value: Any) -> str:
    if isinstance(value, AttentionBackendEnum):
        return value.value
    if isinstance(value, AttentionConfig):
        return value.to_json()
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def engine_argv(kwargs: Dict[str, Any]) -> List[str]:
    """The `pagoda generate` command line of LLM(**kwargs)'s engine options. TypeError for a keyword that
    names no option."""
    options = {o.name: o for o in _core.engine_options()}
    argv: List[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        if key in _FILE_OPTIONS:
            argv += [f"--{name}", str(value)]
            continue
        option = options.get(name)
        if option is None:
            raise TypeError(f"LLM() got an unexpected keyword argument '{key}' (the engine options are those of "
                            "`pagoda generate --help`, with underscores)")
        if option.takes_value:
            # --name=value: a value that starts with a dash stays a value.
            argv.append(f"--{name}={_option_value(name, value)}")
        elif value:
            argv.append(f"--{name}")
        elif option.has_no_form:
            argv.append(f"--no-{name}")
    return argv


class LLM:
    """A model loaded into pagoda's engine, for offline generation (vLLM's LLM).

    ``model``: a Hugging Face model folder, a hub repo id (HF cache, or downloaded), or ``dummy:tiny``
    (built in, random weights); None is the engine's default model. ``attention_backend`` forces a backend
    (a name or AttentionBackendEnum); ``attention_config`` is an AttentionConfig or a dict of its fields.
    Any other engine option of ``pagoda generate`` is a keyword argument: ``max_num_seqs=8``,
    ``kv_cache_space=1``, ``device="cpu"``, ``log_level="DEBUG"``, ``config="engine.yaml"``.
    """

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        tokenizer: Optional[str] = None,
        skip_tokenizer_init: bool = False,
        dtype: str = "auto",
        kv_cache_dtype: Optional[str] = None,
        block_size: Optional[int] = None,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: Optional[float] = None,
        enforce_eager: bool = False,
        seed: Optional[int] = None,
        revision: Optional[str] = None,
        attention_backend: Union[str, AttentionBackendEnum, None] = None,
        attention_config: Union[AttentionConfig, Dict[str, Any], None] = None,
        **kwargs: Any,
    ) -> None:
        for key, default in _IGNORED.items():
            value = kwargs.pop(key, default)
            if value != default:
                logger.warning("LLM(%s=%r) has no effect in pagoda.", key, value)
        for key, (neutral, why) in _NEUTRAL_ONLY.items():
            value = kwargs.pop(key, neutral)
            if value != neutral:
                raise ValueError(f"{key}={value!r} is not supported: {why} ({key} must be {neutral!r}).")
        for key, (accepted, why) in _ONE_OF.items():
            value = kwargs.pop(key, accepted[0])
            if value not in accepted:
                raise ValueError(f"{key}={value!r} is not supported: {why} ({key} must be one of {accepted}).")
        # hf_token: a string is the Hugging Face token for the model's download (the hub client reads HF_TOKEN
        # while the engine starts); True or None: the token the environment or the token file gives.
        hf_token = kwargs.pop("hf_token", None)
        if hf_token is not None and not isinstance(hf_token, (str, bool)):
            raise ValueError(f"hf_token must be a string, True or None, got {hf_token!r}")
        options: Dict[str, Any] = {
            "model": model, "tokenizer": tokenizer, "revision": revision, "dtype": dtype,
            "kv_cache_dtype": kv_cache_dtype, "block_size": block_size, "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization, "enforce_eager": enforce_eager, "seed": seed,
            "attention_backend": attention_backend, "attention_config": attention_config,
        }
        options.update(kwargs)
        # An encoder model (a BERT-family folder, or its name in pagoda's model cache) runs on the embedder:
        # LLM.embed() only. The engine options apply to it, or are refused (never ignored).
        folder = _core.embedding_model_folder(model) if model else None
        self._embedder = None
        if folder is not None:
            self._embedder = _core.Embedder(folder, _core.EngineArgs(engine_argv(dict(options, model=folder))))
        if self._embedder is not None:
            self._engine = None
            self._seed = seed
            self._skip_tokenizer_init = skip_tokenizer_init
            self._tokenizer = None if skip_tokenizer_init else Tokenizer(self._embedder.tokenizer)
            self._request_counter = itertools.count()
            self._prompt_counter = itertools.count()
            return
        args = _core.EngineArgs(engine_argv(options))
        if args.log_level:
            logger.setLevel(args.log_level)
        saved_token = os.environ.get("HF_TOKEN")
        if isinstance(hf_token, str):
            os.environ["HF_TOKEN"] = hf_token
        try:
            self._engine = _core.Engine(args)
        finally:
            if isinstance(hf_token, str):
                if saved_token is None:
                    os.environ.pop("HF_TOKEN", None)
                else:
                    os.environ["HF_TOKEN"] = saved_token
        self._seed = args.seed
        self._skip_tokenizer_init = skip_tokenizer_init
        core_tokenizer = self._engine.tokenizer
        self._tokenizer = None if core_tokenizer is None or skip_tokenizer_init else Tokenizer(core_tokenizer)
        self._request_counter = itertools.count()  # engine requests: their default seeds
        self._prompt_counter = itertools.count()  # RequestOutput.request_id, as vLLM numbers them

    # ---- information ----

    def get_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise ValueError("this LLM has no tokenizer (the model has no tokenizer.json, or skip_tokenizer_init=True)")
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    @property
    def model(self) -> str:
        return self._engine.model

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def attention_backends(self) -> List[str]:
        """The attention backend of each layer, as selected at startup."""
        return self._engine.attention_backends

    @property
    def device(self) -> str:
        return self._engine.device

    # ---- generation ----

    def generate(
        self,
        prompts: Optional[Prompts] = None,
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        use_tqdm: Any = True,
        lora_request: Any = None,
        priority: Optional[List[int]] = None,
        prompt_token_ids: Union[List[int], List[List[int]], None] = None,
    ) -> List[RequestOutput]:
        """Completes each prompt: a string, a TextPrompt or TokensPrompt dict, a list of token ids, or a list
        of those. ``sampling_params``: one for all prompts or one per prompt (default SamplingParams()).
        Returns one RequestOutput per prompt, in order. Ctrl-C (KeyboardInterrupt) stops the batch."""
        if self._engine is None:
            raise ValueError("LLM.generate() needs a generative model; this LLM holds an embedding model: use "
                             "LLM.embed()")
        parsed = self._parse_prompts(prompts, prompt_token_ids)
        return self._run(parsed, sampling_params, use_tqdm, lora_request, priority)

    def chat(
        self,
        messages: Union[Conversation, List[Conversation]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        use_tqdm: Any = True,
        lora_request: Any = None,
        chat_template: Optional[str] = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
        mm_processor_kwargs: Optional[Dict[str, Any]] = None,
    ) -> List[RequestOutput]:
        """Renders each conversation with the model's chat template (or ``chat_template``), as the server's
        /v1/chat/completions does, and completes it. ``messages``: one conversation (a list of
        {"role", "content"} dicts) or a list of them."""
        if chat_template_content_format not in ("auto", "string", "openai"):
            raise ValueError(f"chat_template_content_format must be 'auto', 'string' or 'openai', "
                             f"got {chat_template_content_format!r}")
        if mm_processor_kwargs:
            raise ValueError("pagoda serves text-only models: mm_processor_kwargs is not supported")
        conversations: List[Conversation] = (
            [messages] if not messages or isinstance(messages[0], dict) else list(messages))  # type: ignore[list-item]
        tokenizer = self.get_tokenizer()
        parsed = []
        for conversation in conversations:
            conversation = _content_format(conversation, chat_template_content_format)
            text = render_chat(tokenizer._t, conversation, chat_template=chat_template,
                               add_generation_prompt=add_generation_prompt,
                               continue_final_message=continue_final_message, tools=tools,
                               kwargs=chat_template_kwargs)
            ids = tokenizer.encode(text, add_special_tokens=False)
            if not ids:
                raise ValueError("the chat prompt is empty (no tokens)")
            parsed.append((text, ids))
        return self._run(parsed, sampling_params, use_tqdm, lora_request, None)

    # ---- internals ----

    def embed(self, prompts: Any, *, use_tqdm: bool = False, **kwargs: Any) -> List[EmbeddingRequestOutput]:
        """vLLM's LLM.embed(): one EmbeddingRequestOutput per prompt (a string, a TextPrompt/TokensPrompt dict,
        a list of token ids, or a list of those). Texts get [CLS] ... [SEP] and are truncated to the model's
        max_seq_length as sentence-transformers does; all prompts run as one batch."""
        if self._embedder is None:
            raise ValueError("LLM.embed() needs an embedding model (a BERT-family encoder such as "
                             "all-MiniLM-L6-v2); this LLM holds a generative model")
        for key in kwargs:
            if kwargs[key] is not None:
                raise ValueError(f"LLM.embed({key}=...) is not supported by pagoda")
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, (list, tuple)) and prompts
                                                 and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids: List[List[int]] = []
        for p in prompts:
            if isinstance(p, str):
                ids.append(self._embedder.tokenize(p))
            elif isinstance(p, dict) and "prompt_token_ids" in p:
                ids.append([int(t) for t in p["prompt_token_ids"]])
            elif isinstance(p, dict) and "prompt" in p:
                ids.append(self._embedder.tokenize(p["prompt"]))
            elif isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p):
                ids.append(list(p))
            else:
                raise TypeError(f"a prompt must be a string, a TextPrompt/TokensPrompt dict or a list of token ids, "
                                f"got {type(p).__name__}")
        vectors = self._embedder.embed(ids)
        return [EmbeddingRequestOutput(request_id=str(next(self._prompt_counter)), outputs=EmbeddingOutput(v),
                                       prompt_token_ids=i) for v, i in zip(vectors, ids)]

    def _parse_prompts(self, prompts: Any, prompt_token_ids: Any) -> List[Tuple[Optional[str], List[int]]]:
        if prompt_token_ids is not None:
            if prompts is not None:
                raise ValueError("give prompts or prompt_token_ids, not both")
            prompts = prompt_token_ids
        if prompts is None:
            raise ValueError("no prompts given")
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, (list, tuple)) and prompts
                                                 and isinstance(prompts[0], int)):
            prompts = [prompts]
        parsed: List[Tuple[Optional[str], List[int]]] = []
        for p in prompts:
            if isinstance(p, str):
                parsed.append((p, self._encode(p)))
            elif isinstance(p, dict):
                if "prompt_token_ids" in p:
                    parsed.append((p.get("prompt"), [int(t) for t in p["prompt_token_ids"]]))
                elif "prompt" in p:
                    parsed.append((p["prompt"], self._encode(p["prompt"])))
                else:
                    raise ValueError("a prompt dict needs 'prompt' (TextPrompt) or 'prompt_token_ids' (TokensPrompt)")
            elif isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p):
                parsed.append((None, list(p)))
            else:
                raise TypeError(f"a prompt must be a string, a TextPrompt/TokensPrompt dict or a list of token ids, "
                                f"got {type(p).__name__}")
        return parsed

    def _encode(self, text: str) -> List[int]:
        if self._tokenizer is None:
            raise ValueError("this LLM has no tokenizer (the model has no tokenizer.json, or skip_tokenizer_init=True): "
                             "give prompts as token ids, e.g. {'prompt_token_ids': [1, 2, 3]}")
        return self._tokenizer.encode(text)

    def _run(self, parsed: List[Tuple[Optional[str], List[int]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None], use_tqdm: Any,
             lora_request: Any, priority: Optional[List[int]]) -> List[RequestOutput]:
        if lora_request is not None:
            raise ValueError("pagoda has no LoRA support: lora_request must be None")
        if priority is not None and any(priority):
            raise ValueError("pagoda schedules first come, first served: priority must be None or all 0")
        if sampling_params is None:
            params = [self.get_default_sampling_params()] * len(parsed)
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(parsed)
        else:
            params = list(sampling_params)
            if len(params) != len(parsed):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
        requests = []
        for (text, ids), sp in zip(parsed, params):
            ids = _truncate(ids, sp.truncate_prompt_tokens, self.max_model_len)
            for k in range(sp.n):
                # A request's seed: its own (+ k for its k-th completion), else the LLM's seed + the
                # request's number, so that every request of a process samples its own stream.
                number = next(self._request_counter)
                seed = sp.seed + k if sp.seed is not None else self._seed + number
                r = sp._engine_request(seed)
                r.prompt_ids = ids
                if sp.max_tokens is None:
                    r.max_tokens = max(self.max_model_len - len(ids), 0)
                if self._skip_tokenizer_init:
                    r.detokenize = False
                requests.append(r)
        progress = Progress(use_tqdm, len(parsed)) if use_tqdm else None
        try:
            results = self._engine.generate(requests, progress)
        finally:
            if progress is not None:
                progress.close()
        outputs: List[RequestOutput] = []
        it = iter(results)
        for (text, _), group, sp in zip(parsed, _group(requests, params), params):
            done = [next(it) for _ in range(sp.n)]
            outputs.append(RequestOutput(
                request_id=str(next(self._prompt_counter)), prompt=text, prompt_token_ids=list(group[0].prompt_ids),
                prompt_logprobs=None, outputs=[self._completion(k, r) for k, r in enumerate(done)], finished=True,
                num_cached_tokens=done[0].num_cached_tokens))
        return outputs

    def _completion(self, index: int, r: Any) -> CompletionOutput:
        logprobs = None
        cumulative = None
        if r.logprobs is not None:
            logprobs = []
            cumulative = 0.0
            for t in r.logprobs:
                entry: Dict[int, Logprob] = {t.token: Logprob(t.logprob, None, self._token_text(t.token))}
                for rank, (tid, lp) in enumerate(t.top, start=1):
                    if tid == t.token:
                        entry[tid].rank = rank
                    else:
                        entry[tid] = Logprob(lp, rank, self._token_text(tid))
                logprobs.append(entry)
                cumulative += t.logprob
        stop_reason: Union[str, int, None] = r.stop_string if r.stop_string is not None else r.stop_token_id
        return CompletionOutput(index=index, text=r.text, token_ids=list(r.token_ids), cumulative_logprob=cumulative,
                                logprobs=logprobs, finish_reason=r.finish_reason, stop_reason=stop_reason)

    def _token_text(self, token: int) -> Optional[str]:
        return None if self._tokenizer is None else self._tokenizer.decode([token])


def _truncate(ids: List[int], truncate: Optional[int], max_model_len: int) -> List[int]:
    if truncate is None:
        return ids
    keep = max_model_len if truncate == -1 else truncate
    return ids[-keep:] if len(ids) > keep else ids


def _group(requests: List[Any], params: List[SamplingParams]) -> List[List[Any]]:
    groups, at = [], 0
    for sp in params:
        groups.append(requests[at:at + sp.n])
        at += sp.n
    return groups


__all__ = ["LLM"]


def _content_format(conversation: Conversation, fmt: str) -> Conversation:
    """Message contents as the template receives them, as vLLM's chat_template_content_format: "string" joins
    the text parts of a list content with newlines; "openai" turns a string content into one text part;
    "auto" passes them as given."""
    if fmt == "auto":
        return conversation
    out = []
    for message in conversation:
        content = message.get("content")
        if fmt == "string" and isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ValueError("pagoda serves text-only models: only text content parts are supported")
                texts.append(str(part.get("text", "")))
            message = {**message, "content": "\n".join(texts)}
        elif fmt == "openai" and isinstance(content, str):
            message = {**message, "content": [{"type": "text", "text": content}]}
        out.append(message)
    return out
