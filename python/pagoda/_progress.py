"""The progress bar of LLM.generate(): tqdm's when it is installed (vLLM's bar and texts), a plain one else."""

from __future__ import annotations

import sys
import time
from typing import Any


class _PlainBar:
    """One line on stderr, rewritten in place: ``Processed prompts: 3/8 ... est. speed input: ...``."""

    def __init__(self, total: int, desc: str) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self.postfix = ""
        self._start = time.monotonic()
        self._draw()

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def _draw(self) -> None:
        width = 30
        filled = width * self.n // self.total if self.total else width
        elapsed = time.monotonic() - self._start
        line = f"\r{self.desc}: {100 * self.n // max(self.total, 1):3d}%|{'#' * filled}{' ' * (width - filled)}| " \
               f"{self.n}/{self.total} [{elapsed:.1f}s{', ' + self.postfix if self.postfix else ''}]"
        sys.stderr.write(line)
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def _make_bar(use_tqdm: Any, total: int) -> Any:
    desc = "Processed prompts"
    if callable(use_tqdm):  # vLLM: a tqdm-like factory
        return use_tqdm(total=total, desc=desc, dynamic_ncols=True)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainBar(total, desc)
    return tqdm(total=total, desc=desc, dynamic_ncols=True)


class Progress:
    """Fed by the engine between steps: (finished, total, prompt_tokens, output_tokens, seconds)."""

    def __init__(self, use_tqdm: Any, num_prompts: int) -> None:
        self._bar: Any = None
        self._use_tqdm = use_tqdm
        self._num_prompts = num_prompts
        self._done = 0

    def __call__(self, finished: int, total: int, prompt_tokens: int, output_tokens: int, seconds: float) -> None:
        if not self._use_tqdm or total == 0:
            return
        if self._bar is None:
            self._bar = _make_bar(self._use_tqdm, self._num_prompts)
        # The engine counts its requests; a prompt with SamplingParams(n=k) is k of them.
        done = finished * self._num_prompts // total
        if seconds > 0:
            self._bar.set_postfix_str(f"est. speed input: {prompt_tokens / seconds:.2f} toks/s, "
                                      f"output: {output_tokens / seconds:.2f} toks/s", refresh=False)
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
