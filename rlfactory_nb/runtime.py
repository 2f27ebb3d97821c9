"""One place builds a run's tools from its config, for training, `rf.evaluate` and the notebooks.

A run's tools are the config's tools file plus, optionally, tools from the kernel (a ToolSet or
`@rf.tool` functions: `launch(cfg, cluster, tools=[my_tool])`). Settings come in this order: the
ToolSet defaults, then the tools file's `settings:`, then the run config's `tools.*` keys that are
set (they default to None, so `max_result_chars: 1000` in a tools file holds in training unless the
run config says otherwise). The agent is built next to it by `Agent.from_config`.

Tools from the kernel are first turned into a `ToolsFile` (`extra_tools`): plain, picklable data
(server configs, PythonTool functions, settings) that travels to the cluster and into the run folder,
where a started ToolSet, with its processes and sessions, could not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from rlfactory_nb.config import RunConfig
from rlfactory_nb.tools.config import FunctionConfig, ToolSetSettings, ToolsFile, load_tools_config
from rlfactory_nb.tools.python import PythonTool
from rlfactory_nb.tools.toolset import ToolSet

ExtraTools = ToolsFile | ToolSet | PythonTool | Callable[..., Any] | Sequence[PythonTool | Callable[..., Any]]
"""what `tools=` takes: a ToolSet, one `@rf.tool` function, or a list of them"""


def extra_tools(tools: ExtraTools | None) -> ToolsFile | None:
    """`tools` from the kernel as a ToolsFile (servers, functions, settings); None for None or []."""
    if tools is None or isinstance(tools, ToolsFile):
        return tools
    if isinstance(tools, ToolSet):
        functions = tuple(FunctionConfig(target=fn, options=options) for fn, options in tools._functions)
        servers = tuple(connection.config for connection in tools.connections.values())
        return ToolsFile(servers, functions, tools.settings, source="tools= (a ToolSet)")
    items = [tools] if callable(tools) else list(tools)
    for index, item in enumerate(items):
        if not callable(item):
            raise TypeError(
                f"tools=[...][{index}] is a {type(item).__name__}: pass @rf.tool functions, plain functions or a ToolSet"
            )
    if not items:
        return None
    return ToolsFile(functions=tuple(FunctionConfig(target=item) for item in items), source="tools= (functions)")


def run_tools(cfg: RunConfig, extra: ExtraTools | None = None) -> ToolsFile | None:
    """The tools of a run: the config's tools file and `extra`, with settings ordered as the module
    docstring says; None when the run has no tools."""
    parts = [load_tools_config(cfg.tools.config)] if cfg.tools.config is not None else []
    added = extra_tools(extra)
    if added is not None:
        parts.append(added)
    if not parts:
        return None
    settings = parts[0].settings if cfg.tools.config is not None else (added.settings if added else ToolSetSettings())
    return ToolsFile(
        servers=tuple(server for part in parts for server in part.servers),
        functions=tuple(function for part in parts for function in part.functions),
        settings=dataclasses.replace(settings, **cfg.tools.overrides()),
        source=" + ".join(part.source for part in parts),
    )


def build_tools(cfg: RunConfig, extra: ExtraTools | None = None) -> ToolSet | None:
    """The run's ToolSet (not started: `await tools.start()`), or None when it has no tools.

    >>> cfg = RunConfig(name="x")
    >>> build_tools(cfg) is None
    True
    """
    spec = run_tools(cfg, extra)
    return None if spec is None else ToolSet.from_config(spec)
