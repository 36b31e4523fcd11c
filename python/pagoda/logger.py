"""pagoda's logging, as vLLM's: every engine line goes to the ``pagoda`` logger of Python's ``logging``.

At import the ``pagoda`` logger gets a handler that prints the CLI's format to stderr
(``INFO 10-21 10:53:17 [selector.cc:98] message``), the level of ``PAGODA_LOGGING_LEVEL`` (default INFO)
and ``propagate = False``. ``PAGODA_CONFIGURE_LOGGING=0`` leaves the logger alone, for applications that
configure ``logging`` themselves (as ``VLLM_CONFIGURE_LOGGING=0``).
"""

from __future__ import annotations

import logging
import os
import sys

from . import _core

_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
_DATE_FORMAT = "%m-%d %H:%M:%S"
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

logger = logging.getLogger("pagoda")


def init_logger(name: str) -> logging.Logger:
    """The logger of a pagoda module (vLLM's ``vllm.logger.init_logger``)."""
    return logging.getLogger(name)


def _configure() -> None:
    if os.environ.get("PAGODA_CONFIGURE_LOGGING", "1") == "0":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt=_DATE_FORMAT))
    logger.addHandler(handler)
    level = os.environ.get("PAGODA_LOGGING_LEVEL", "INFO")
    # An invalid value is reported by the engine when an LLM starts, with the CLI's text.
    logger.setLevel(level if level in _LEVELS else "INFO")
    logger.propagate = False


def _forward(levelno: int, file: str, line: int, message: str) -> None:
    """Receives the engine's log lines (any thread, GIL held) and logs them as records of the C++ source line."""
    if not logger.isEnabledFor(levelno):
        return
    record = logger.makeRecord(logger.name, levelno, file, line, message, None, None)
    logger.handle(record)


_configure()
_core.set_log_forwarder(_forward)
