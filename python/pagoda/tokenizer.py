"""The tokenizer LLM.get_tokenizer() returns: pagoda's C++ tokenizer (the engine's) with the methods vLLM
scripts call on a Hugging Face tokenizer."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _core

Conversation = List[Dict[str, Any]]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_chat(tokenizer: "_core.Tokenizer", conversation: Conversation, *, chat_template: Optional[str],
                add_generation_prompt: bool, continue_final_message: bool, tools: Optional[List[Dict[str, Any]]],
                kwargs: Optional[Dict[str, Any]]) -> str:
    """Renders one conversation with `chat_template` (template text or a file) or the tokenizer's template,
    as the server's chat endpoint does, continue_final_message included."""
    if continue_final_message and add_generation_prompt:
        raise ValueError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    template = chat_template or ""
    if template and "{" not in template and os.path.isfile(template):
        with open(template, encoding="utf-8") as f:
            template = f.read()
    text = tokenizer.render_chat(template, _json(list(conversation)), _json(tools), add_generation_prompt,
                                 _json(kwargs or {}))
    if continue_final_message:
        final = conversation[-1].get("content") if conversation else None
        if not isinstance(final, str):
            raise ValueError("continue_final_message needs the final message's 'content' to be a string")
        at = text.rfind(final) if final else -1
        if at < 0:
            raise ValueError("continue_final_message: the chat template's rendering does not contain the final message")
        text = text[: at + len(final)]
    return text


class Tokenizer:
    """Encoding, decoding and chat templates of a model (Hugging Face tokenizer.json semantics)."""

    def __init__(self, core: "_core.Tokenizer") -> None:
        self._t = core

    @classmethod
    def from_pretrained(cls, path: Union[str, os.PathLike]) -> "Tokenizer":
        """Loads a tokenizer.json, or the folder that holds one (with its tokenizer_config.json), or the
        tokenizer of a GGUF file (its tokenizer.ggml.* metadata)."""
        path = os.fspath(path)
        if os.path.isfile(path) and path.endswith(".gguf"):
            return cls(_core.tokenizer_from_gguf(path))
        return cls(_core.Tokenizer.from_file(path))

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> List[int]:
        return self._t.encode(text, add_special_tokens)

    def decode(self, token_ids: Union[int, Sequence[int]], skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._t.decode(list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = False, **kwargs: Any) -> List[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text: Union[str, List[str]], add_special_tokens: bool = True, **kwargs: Any) -> Dict[str, Any]:
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}

    def apply_chat_template(self, conversation: Union[Conversation, List[Conversation]],
                            tools: Optional[List[Dict[str, Any]]] = None, chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            tokenize: bool = True, **kwargs: Any) -> Union[str, List[int], List[str], List[List[int]]]:
        """Hugging Face's defaults: ``tokenize=True`` returns ids (no special tokens added: the template
        writes them), ``add_generation_prompt=False``. Extra keyword arguments reach the template."""
        if conversation and isinstance(conversation[0], (list, tuple)):
            return [self.apply_chat_template(c, tools, chat_template, add_generation_prompt,  # type: ignore[misc]
                                             continue_final_message, tokenize, **kwargs) for c in conversation]
        text = render_chat(self._t, conversation, chat_template=chat_template,  # type: ignore[arg-type]
                           add_generation_prompt=add_generation_prompt,
                           continue_final_message=continue_final_message, tools=tools, kwargs=kwargs)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]) -> Union[str, List[str]]:
        if isinstance(ids, int):
            return self._t.id_to_token(ids)
        return [self._t.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]) -> Union[Optional[int], List[Optional[int]]]:
        if isinstance(tokens, str):
            return self._t.token_to_id(tokens)
        return [self._t.token_to_id(t) for t in tokens]

    @property
    def vocab_size(self) -> int:
        return self._t.vocab_size

    def __len__(self) -> int:
        return self._t.vocab_size

    @property
    def bos_token(self) -> Optional[str]:
        return self._t.bos_token or None

    @property
    def eos_token(self) -> Optional[str]:
        return self._t.eos_token or None

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._t.bos_id

    @property
    def eos_token_id(self) -> Optional[int]:
        ids = self._t.eos_ids
        return ids[0] if ids else None

    @property
    def chat_template(self) -> Optional[str]:
        return self._t.chat_template or None


__all__ = ["Tokenizer"]
