"""Tools for agents: MCP servers and Python functions behind one ToolSet (see toolset.py); other
models and agents as tools are `rf.model_tool` and `rf.agent_tool` (delegate.py, not imported here:
it loads the engines, and tool servers import this package).

The names load on first use, so importing one submodule (the Environment's `tools.python`, say)
does not import the MCP client: a machine without `mcp` (the GPU check's) still runs the agent loop.
"""

import importlib
from typing import Any

from rlfactory_nb.errors import InvalidArguments, ServerStartError, ServerUnavailable
from rlfactory_nb.types import ToolResult

_HOMES = {
    "ToolCache": "cache",
    "ServerConfig": "config",
    "ToolOptions": "config",
    "ToolSetSettings": "config",
    "load_tools_config": "config",
    "MCPConnection": "mcp",
    "PythonTool": "python",
    "ToolReply": "python",
    "tool": "python",
    "ToolSet": "toolset",
}

__all__ = [
    "InvalidArguments",
    "MCPConnection",
    "PythonTool",
    "ServerConfig",
    "ServerStartError",
    "ServerUnavailable",
    "ToolCache",
    "ToolOptions",
    "ToolReply",
    "ToolResult",
    "ToolSet",
    "ToolSetSettings",
    "load_tools_config",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rlfactory_nb.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlfactory_nb.tools.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
