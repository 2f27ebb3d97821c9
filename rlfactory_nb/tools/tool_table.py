"""The tool table of a ToolSet: each tool a server lists or a Python function offers, resolved once
at start into a `ToolEntry` (its spec, options merged over the settings, how to invoke it, its
concurrency limit) under the names it answers to.
"""

from __future__ import annotations

import asyncio
import difflib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.config_schema import ConfigError
from rlfactory_nb.tools.config import FunctionConfig, ServerConfig, ToolOptions, ToolSetSettings
from rlfactory_nb.tools.mcp import MCPConnection
from rlfactory_nb.tools.mcp_protocol import CallOutcome, RemoteTool
from rlfactory_nb.tools.python import PythonTool, as_python_tool
from rlfactory_nb.types import ToolSpec

PYTHON_SOURCE = "python"
"""the `server` of tools that are Python functions"""

Invoke = Callable[[str, dict[str, Any]], Awaitable[CallOutcome]]
"""how a tool is called: (name on its server, arguments) -> outcome"""


@dataclass
class ToolEntry:
    """One callable tool, as resolved at start."""

    spec: ToolSpec
    """the spec the model sees (its `name` is the exposed name)"""
    qualified: str
    remote_name: str
    options: ToolOptions
    invoke: Invoke
    semaphore: asyncio.Semaphore | None


def tool_table(
    listings: Mapping[str, list[RemoteTool]],
    connections: Mapping[str, MCPConnection],
    functions: Sequence[tuple[PythonTool, ToolOptions]],
    settings: ToolSetSettings,
) -> tuple[dict[str, ToolEntry], list[str]]:
    """The tools by every name they answer to, and the names the model sees: short names where
    unique, `source.tool` always (tools/toolset.py's docstring). `listings`: what each server lists."""
    problems: list[str] = []
    found: list[tuple[str, RemoteTool | PythonTool, ToolOptions, Invoke]] = []
    for server, tools in listings.items():
        config = connections[server].config
        check_named_tools(config, {t.name for t in tools}, problems)
        enabled = [t for t in tools if config.enabled is None or t.name in config.enabled]
        found += [
            (server, t, config.tool_options(t.name), connections[server].call) for t in enabled
        ]
    found += [(PYTHON_SOURCE, fn, options, python_invoke(fn)) for fn, options in functions]
    if problems:
        raise ConfigError(problems, "tools config")
    counts = Counter(t.name for _, t, _, _ in found)
    defaults = ToolOptions(timeout_s=settings.timeout_s, cache=settings.cache)
    table: dict[str, ToolEntry] = {}
    exposed_names: list[str] = []
    for source, t, options, invoke in found:
        qualified = f"{source}.{t.name}"
        exposed = t.name if counts[t.name] == 1 else qualified
        options = options.merged_over(defaults)
        spec = ToolSpec(exposed, options.description or t.description, t.input_schema, server=source)
        limit = asyncio.Semaphore(options.max_concurrency) if options.max_concurrency else None
        table[exposed] = table[qualified] = ToolEntry(
            spec, qualified, t.name, options, invoke, limit
        )
        exposed_names.append(exposed)
    return table, exposed_names


def function_entry(
    item: FunctionConfig | PythonTool | Callable[..., Any], index: int
) -> tuple[PythonTool, ToolOptions]:
    config = item if isinstance(item, FunctionConfig) else FunctionConfig(target=item)
    try:
        fn = as_python_tool(config.target, name=config.name, description=config.options.description)
    except (ValueError, TypeError) as exc:
        raise ConfigError([f"functions[{index}]: {exc}"], "tools config") from exc
    return fn, config.options


def python_invoke(fn: PythonTool) -> Invoke:
    async def invoke(_name: str, arguments: dict[str, Any]) -> CallOutcome:
        reply = await fn.run(arguments)
        return CallOutcome(False, reply.text, reply.details or None)

    return invoke


def check_named_tools(config: ServerConfig, offered: set[str], problems: list[str]) -> None:
    """Tools named in `enabled` or `tools:` must exist on the server: a typo there is silent otherwise."""
    for where, names in (("enabled", config.enabled or ()), ("tools", tuple(config.tools))):
        for tool_name in names:
            if tool_name not in offered:
                close = difflib.get_close_matches(tool_name, sorted(offered), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"it offers: {', '.join(sorted(offered))}"
                problems.append(
                    f"server '{config.name}'.{where}: the server has no tool '{tool_name}'; {hint}"
                )
