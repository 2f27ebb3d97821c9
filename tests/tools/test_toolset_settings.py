"""`ToolSet.from_config` and `from_functions` check their keyword settings on every path: a parsed
ToolsFile no longer drops them, and a typo is a ConfigError naming the closest key."""

import pytest

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.config import load_tools_config


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


SOURCE = {"functions": [{"function": "tests.tools.test_toolset_settings:add"}], "settings": {"timeout_s": 7}}


@pytest.mark.parametrize("form", ["dict", "parsed"])
def test_settings_override_the_file_whatever_form_it_comes_in(form):
    source = SOURCE if form == "dict" else load_tools_config(SOURCE)
    tools = ToolSet.from_config(source, max_result_chars=99)
    assert tools.settings.max_result_chars == 99 and tools.settings.timeout_s == 7.0
    with pytest.raises(ConfigError, match="timout_s: unknown key; did you mean 'timeout_s'"):
        ToolSet.from_config(source, timout_s=5)
    with pytest.raises(ConfigError, match="cache"):
        ToolSet.from_config(source, cache="yes")


def test_from_functions_checks_its_settings_too():
    assert ToolSet.from_functions(add, timeout_s=3).settings.timeout_s == 3.0
    with pytest.raises(ConfigError, match="did you mean 'max_concurrency'"):
        ToolSet.from_functions(add, max_concurency=4)


async def test_what_call_returns_is_importable_where_the_readme_points():
    import rlfactory_nb as rf

    async with ToolSet.from_functions(add) as tools:
        result = await tools.call("add", {"a": 2, "b": 3})
    assert isinstance(result, rf.ToolResult) and rf.tools.ToolResult is rf.ToolResult
    assert result == rf.ToolResult(status=result.status, content="5", **{
        k: getattr(result, k) for k in result.__dataclass_fields__ if k not in ("status", "content")})
