"""Tools from the kernel (`tools=` of `train`, `launch`, `rf.evaluate`) as plain data.

A ToolSet, one `@rf.tool` function or a list of them become a `ToolsFile`: server configs, PythonTool
functions and settings, which can be pickled and so travel to the cluster and into the run folder,
where a started ToolSet, with its processes and sessions, could not. It sits with the tools (layer 2)
because the run's objects (data/objects.py) and its runtime (runtime.py) both need it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlfactory_nb.errors import ArgumentTypeError
from rlfactory_nb.tools.config import FunctionConfig, ToolsFile
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
            raise ArgumentTypeError(
                f"tools=[...][{index}] is a {type(item).__name__}: pass @rf.tool functions, plain functions or a ToolSet"
            )
    if not items:
        return None
    return ToolsFile(functions=tuple(FunctionConfig(target=item) for item in items), source="tools= (functions)")
