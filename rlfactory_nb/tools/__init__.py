"""Tools for agents: MCP servers and Python functions behind one ToolSet (see toolset.py)."""

from rlfactory_nb.errors import InvalidArguments, ServerStartError, ServerUnavailable
from rlfactory_nb.tools.cache import ToolCache
from rlfactory_nb.tools.config import ServerConfig, ToolOptions, ToolSetSettings, load_tools_config
from rlfactory_nb.tools.mcp import MCPConnection
from rlfactory_nb.tools.python import PythonTool, tool
from rlfactory_nb.tools.toolset import ToolSet

__all__ = [
    "InvalidArguments",
    "MCPConnection",
    "PythonTool",
    "ServerConfig",
    "ServerStartError",
    "ServerUnavailable",
    "ToolCache",
    "ToolOptions",
    "ToolSet",
    "ToolSetSettings",
    "load_tools_config",
    "tool",
]
