"""Fixtures shared across the suite: the embedded tiny model (built once per cache folder) and the
OpenAI-compatible stub server the judge tests talk to."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# vLLM imports setuptools (through torch.utils.cpp_extension) in the middle of the suite, when some
# earlier test has already imported the standard library's distutils; setuptools' distutils shim then
# asserts and every later vLLM test errors (seen in a whole-suite run, never in one file). Use the
# standard library's distutils throughout (Python 3.11 has it).
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

JUDGE_STUB = Path(__file__).parent / "rewards" / "openai_stub_server.py"


@pytest.fixture(scope="session")
def tiny_policy():
    """The tiny-calculator preset (shipped built; built and cached only when its recipe changed)."""
    from rlfactory_nb.policy import Policy

    return Policy.load("tiny-calculator")


@pytest.fixture(scope="module")
def judge_server():
    """tests/rewards/openai_stub_server.py on 127.0.0.1; each request's behaviour is scripted by its
    model name (see that file)."""
    process = subprocess.Popen([sys.executable, str(JUDGE_STUB)], stdout=subprocess.PIPE, text=True)
    port = int(process.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=5)
