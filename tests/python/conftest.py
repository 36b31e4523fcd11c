"""Shared fixtures of the Python API suite (tests/python), run by scripts/test.sh against the package
installed from the CMake build: the test data (PAGODA_TEST_DATA, default ../shared beside the clone), the
`pagoda` command the package installed, and helpers to run it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

DATA = pathlib.Path(os.environ.get("PAGODA_TEST_DATA") or pathlib.Path(__file__).resolve().parents[3] / "shared")
STORIES = DATA / "models" / "stories260K"
STORIES_HF = STORIES / "hf"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    if not STORIES_HF.is_dir():
        pytest.fail(f"test data not found at {DATA} (set PAGODA_TEST_DATA to the shared/ folder)")
    return DATA


@pytest.fixture(scope="session")
def stories(data_dir) -> str:
    return str(STORIES_HF)


@pytest.fixture(scope="session")
def golden(data_dir) -> dict:
    return json.loads((STORIES / "golden.json").read_text())


@pytest.fixture(scope="session")
def pagoda_bin() -> str:
    """The `pagoda` command `pip install` put beside this interpreter (the venv's bin/, on PATH once activated)."""
    path = pathlib.Path(sysconfig.get_path("scripts")) / "pagoda"
    assert path.is_file() and os.access(path, os.X_OK), f"`pip install` did not install the pagoda command at {path}"
    return str(path)


def run_cli(pagoda_bin: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([pagoda_bin, *args], capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})


def cli_error(result: subprocess.CompletedProcess) -> str:
    """The message of the CLI's final ERROR line (the CLI reports an error as one log line, possibly
    continued on the following lines)."""
    lines = result.stderr.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("ERROR "):
            first = lines[i].split("] ", 1)[1]
            return "\n".join([first] + lines[i + 1:]).rstrip("\n")
    raise AssertionError(f"no ERROR line in the CLI's stderr:\n{result.stderr}")


def run_python(code: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter of this environment (as a user's script would run)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, **kwargs)
