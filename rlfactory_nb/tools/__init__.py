"""Tools for agents: MCP servers and Python functions behind one ToolSet (see toolset.py); other
models and agents as tools are `rf.model_tool` and `rf.agent_tool` (delegate.py, not imported here:
it loads the engines, and tool servers import this package)."""

from rlfactory_nb.errors import InvalidArguments, ServerStartError, ServerUnavailable
from rlfactory_nb.tools.cache import ToolCache
from rlfactory_nb.tools.config import ServerConfig, ToolOptions, ToolSetSettings, load_tools_config
from rlfactory_nb.tools.mcp import MCPConnection
from rlfactory_nb.tools.python import PythonTool, ToolReply, tool
from rlfactory_nb.tools.toolset import ToolSet
from rlfactory_nb.types import ToolResult

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
