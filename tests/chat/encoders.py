"""The official Python prompt encoders in ../shared/reference/templates_new/ (DeepSeek V3.2/V4/V4.1,
Kimi K3), imported from there as reference data: tests compare the families' own renderers with them,
and skip when the folder is absent. The project never copies them."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Any

import pytest

from tests.chat.templates import TEMPLATES

ENCODERS = TEMPLATES.parent / "templates_new"
FILES = {
    "deepseek_v32": "deepseek_v3_2_encoding_dsv32.py",
    "deepseek_v4": "deepseek_v4_flash_0731_encoding_dsv4.py",
    "deepseek_v41": "deepseek_v4_1_encoding.py",
    "kimi_k3": "kimi_k3_encoding_k3.py",
}
_LOADED: dict[str, ModuleType] = {}


def encoder(name: str) -> ModuleType:
    """The official encoder module `name` (a key of FILES), or a skip when it is absent."""
    path = ENCODERS / FILES[name]
    if not path.exists():
        pytest.skip(f"reference encoder {path} is absent")
    if name not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"official_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]


def template_file(name: str) -> str:
    path = ENCODERS / name
    if not path.exists():
        pytest.skip(f"reference template {path} is absent")
    return path.read_text()


def deepseek_official(name: str, messages: list[dict[str, Any]], tools: list[dict] | None, thinking: bool) -> str:
    """The official DeepSeek encoder's prompt, called as vLLM's DeepSeek tokenizers call it: the
    tools on a system message put first, arguments as JSON text."""
    messages = [_json_arguments(m) for m in messages]
    if tools:
        messages = [{"role": "system", "tools": tools}, *messages]
    return encoder(name).encode_messages(messages, thinking_mode="thinking" if thinking else "chat")


def _json_arguments(message: dict[str, Any]) -> dict[str, Any]:
    if not message.get("tool_calls"):
        return dict(message)
    calls = [
        {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)}}
        for call in message["tool_calls"]
    ]
    return {**message, "tool_calls": calls}
