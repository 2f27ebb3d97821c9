"""A scripted agent with a Python calculator tool: widget logic without a model or a server process."""

import pytest
from rollout.scripted import ScriptedEngine  # tests/ is on sys.path (rootdir-relative packages)

from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools import ToolSet

CALL = '<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
async def tools():
    async with ToolSet.from_functions(add) as toolset:
        yield toolset


def scripted_agent(tokenizer, tools, replies, **options):
    return Agent(None, tools, engine=ScriptedEngine(tokenizer, replies), tokenizer=tokenizer, **options)
