"""Shared pieces of the fault suite: real MCP test servers, a scripted engine, a tiny random model,
an OpenAI-compatible stub for the judge. Each fault is injected for real (a killed process, a
hanging server, a full disk) wherever the machine allows it."""

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tiny_models import random_qwen3, save_with_tokenizer, tiny_run_config

from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.presets.tokenizer import build_tokenizer

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
TEST_SERVER = TESTS / "tools" / "servers" / "test_server.py"
FAULT_REWARDS = Path(__file__).with_name("fault_rewards.py")
CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def server_entry(name: str = "testing", **extra) -> dict:
    """A tools-config entry that starts tests/tools/servers/test_server.py over stdio."""
    return {"name": name, "command": "python", "args": [str(TEST_SERVER)], **extra}


def finishes(call: Callable[[], object], timeout_s: float = 10.0) -> tuple[bool, object]:
    """Run `call` in a thread; (finished, result or exception). A reader blocked on a FIFO never
    finishes: the test fails instead of hanging (the FIFO's writer end is opened at cleanup)."""
    box: dict = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as error:  # noqa: BLE001  (handed to the test)
            box["result"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive(), box.get("result")


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A random tiny Qwen3 with the preset tokenizer, as a Hugging Face folder."""
    return save_with_tokenizer(random_qwen3(), tmp_path_factory.mktemp("faults-tiny-qwen3"))


@pytest.fixture
def make_cfg(tiny_dir, tmp_path):
    """A two-step run config on the tiny random model; `reward` names a function of fault_rewards.py,
    keyword overrides are dotted keys written with `__`."""

    def make(reward: str = "first_token", **overrides) -> RunConfig:
        settings = {"grpo__micro_batch_size": 6, **overrides}
        return tiny_run_config(
            tiny_dir, tmp_path / "runs", f"{FAULT_REWARDS}:{reward}", name="faults", **settings
        )

    return make


@pytest.fixture
def judge_url(judge_server):
    httpx.post(f"{judge_server}/reset")
    return judge_server
