"""Tool configuration: which servers and functions a ToolSet runs, and how each tool is called.

Two file formats load into the same records, so a user can bring what they already have:

* our YAML (or the same structure as a dict)::

      servers:
        - name: calculator
          command: python            # "python"/"python3" mean the running interpreter (sys.executable)
          args: ["-m", "rlfactory_nb.tools.servers.calculator"]
          env: {}                    # merged over a minimal environment (PATH, HOME, ...)
          cwd: null                  # relative paths are resolved against the config file's folder
          enabled: [calculator]      # optional: expose only these of the server's tools
          tools:                     # optional per-tool options
            calculator: {timeout_s: 5, max_concurrency: 8, cache: true, description: "..."}
        - name: remote
          url: http://localhost:8000/mcp      # streamable HTTP
          headers: {Authorization: Bearer xyz}
      functions:                     # plain Python functions, schema derived from hints + docstring
        - mypackage.tools:word_count
        - {function: mypackage.tools:fetch, timeout_s: 10, cache: false}
      settings: {timeout_s: 30, max_concurrency: 64, max_result_chars: 4000, cache: true}

* the `{"mcpServers": {name: {command, args, env} | {url, headers}}}` JSON of desktop MCP clients and
  of the original RLFactory, read unchanged (keys other clients define, such as `autoApprove`, are
  ignored; `"disabled": true` skips a server).

`python` is mapped to `sys.executable` because inside a virtual environment the `python` on PATH is
often another interpreter, one without this package or the server's dependencies.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import reprlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rlfactory_nb.config_schema import ConfigError, build, load_yaml


@dataclass(frozen=True)
class ToolOptions:
    """How one tool is called. None means: use the ToolSet's setting."""

    timeout_s: float | None = None
    """seconds a call may take before it returns status "timeout\""""
    max_concurrency: int | None = None
    """calls of this tool in flight at once (on top of the ToolSet's global limit)"""
    cache: bool | None = None
    """False for tools with side effects or fresh answers: never served from the cache"""
    description: str | None = None
    """replaces the description the server gives (what the model reads)"""

    def merged_over(self, base: ToolOptions) -> ToolOptions:
        """These options, with unset fields taken from `base`."""
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(base, **{k: v for k, v in mine.items() if v is not None})


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: a stdio process (`command`) or a streamable HTTP endpoint (`url`)."""

    name: str
    command: str | None = None
    """executable to start; "python"/"python3" mean the running interpreter"""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """extra environment variables for the process"""
    cwd: str | None = None
    url: str | None = None
    """streamable HTTP endpoint, e.g. http://localhost:8000/mcp"""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: tuple[str, ...] | None = None
    """expose only these tools of the server; None: all"""
    options: ToolOptions = ToolOptions()
    """defaults for every tool of this server"""
    tools: Mapping[str, ToolOptions] = field(default_factory=dict)
    """per-tool options, by the tool's name on the server"""

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def tool_options(self, tool: str) -> ToolOptions:
        return self.tools.get(tool, ToolOptions()).merged_over(self.options)


@dataclass(frozen=True)
class FunctionConfig:
    """One Python function served as a tool."""

    target: str | Callable[..., Any]
    """"module:function", or the function (or `@tool` object) itself when configured from code"""
    name: str | None = None
    """the tool's name; default: the function's name"""
    options: ToolOptions = ToolOptions()


@dataclass(frozen=True)
class ToolSetSettings:
    """Defaults for a whole ToolSet; keyword arguments of `ToolSet.from_config` override the file."""

    timeout_s: float = 30.0
    """default per-call timeout"""
    max_concurrency: int = 64
    """calls in flight at once across all tools"""
    max_result_chars: int = 4000
    """longer tool output is cut here, with a marker saying how much was dropped"""
    cache: bool = True
    """serve repeated calls (same tool, same arguments) from the cache"""
    cache_size: int = 4096
    """entries kept in the in-memory LRU"""
    cache_path: str | None = None
    """sqlite file that records every result, so a run can be replayed later; None: memory only"""
    replay: bool = False
    """answer only from the recorded cache: a call not recorded returns an error, no tool runs"""
    max_restarts: int = 3
    """attempts to restart a crashed server (with backoff) before its calls fail fast"""
    start_timeout_s: float = 60.0
    """seconds a server may take to start and list its tools, at its first start and at each restart
    after a crash (a restart that takes longer marks the server failed: its calls fail at once)"""


@dataclass(frozen=True)
class ToolsFile:
    """A parsed tools config."""

    servers: tuple[ServerConfig, ...] = ()
    functions: tuple[FunctionConfig, ...] = ()
    settings: ToolSetSettings = ToolSetSettings()
    source: str = ""
    """where it came from (file path or "<dict>"), for error messages"""


_OPTION_KEYS = tuple(f.name for f in dataclasses.fields(ToolOptions) if f.name != "description")
_SERVER_KEYS = ("name", "command", "args", "env", "cwd", "url", "headers", "enabled", "tools", *_OPTION_KEYS)
_FUNCTION_KEYS = ("function", "name", *(f.name for f in dataclasses.fields(ToolOptions)))
_TOP_KEYS = ("servers", "functions", "settings")
_PYTHON_NAMES = ("python", "python3")
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""a tools config file longer than this is refused before it is parsed"""


def load_tools_config(source: str | Path | Mapping[str, Any], **settings: Any) -> ToolsFile:
    """Parse a tools config (path to YAML/JSON, or a dict) in either format; `settings` override the
    file's `settings:` section. Raises ConfigError listing every problem."""
    data, label, base_dir = _read(source)
    problems: list[str] = []
    if not isinstance(data, Mapping):
        raise ConfigError(
            [f"expected a mapping with 'servers' or 'mcpServers', got {type(data).__name__}"], label
        )
    if "mcpServers" in data:
        servers = _parse_mcp_servers(data["mcpServers"], base_dir, problems)
        functions: tuple[FunctionConfig, ...] = ()
        file_settings: Mapping[str, Any] = {}
    else:
        _check_keys(data, _TOP_KEYS, "config", problems)
        servers = tuple(
            _parse_server(entry, i, base_dir, problems)
            for i, entry in enumerate(_list(data, "servers", problems))
        )
        functions = tuple(
            _parse_function(entry, i, problems) for i, entry in enumerate(_list(data, "functions", problems))
        )
        file_settings = data.get("settings") or {}
    merged = _build(ToolSetSettings, {**file_settings, **settings}, "settings", problems)
    _check_unique_names(servers, problems)
    if problems:
        raise ConfigError(problems, label)
    return ToolsFile(servers=servers, functions=functions, settings=merged, source=label)


def python_command(command: str) -> str:
    """`python` in a config means the interpreter running this package (see the module docstring)."""
    return sys.executable if command in _PYTHON_NAMES else command


def _read(source: str | Path | Mapping[str, Any]) -> tuple[Any, str, Path]:
    if isinstance(source, Mapping):
        return source, "<dict>", Path.cwd()
    path = Path(source)
    if not path.is_file():
        raise ConfigError([f"tools config file not found: {path} (give a path to a .yaml or .json file)"])
    with path.open("rb") as file:
        raw = file.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError([f"longer than {MAX_CONFIG_BYTES:,} bytes: not a tools config"], str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"not valid UTF-8 ({exc.reason} at byte {exc.start})"], str(path)) from None
    if path.suffix != ".json":
        try:  # load_yaml refuses alias bombs, deep and unreadable YAML as a ConfigError...
            data = load_yaml(text, str(path))
        except yaml.YAMLError as exc:  # ...except characters YAML forbids (its reader checks them first)
            raise ConfigError([f"cannot parse: {exc}"], str(path)) from None
    else:
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigError(["the JSON is nested too deeply"], str(path)) from None
        except ValueError as exc:  # bad syntax, or an integer of over 4,300 digits
            raise ConfigError([f"cannot parse: {exc}"], str(path)) from None
    return data if data is not None else {}, str(path), path.resolve().parent


def _parse_server(entry: Any, index: int, base_dir: Path, problems: list[str]) -> ServerConfig:
    where = f"servers[{index}]"
    if not isinstance(entry, Mapping):
        problems.append(f"{where}: expected a mapping with name and command (or url), got {_shown(entry)}")
        return ServerConfig(name=f"<{index}>")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}.name: every server needs a name (a non-empty string)")
        name = f"<{index}>"
    where = f"server '{name}'"
    _check_keys(entry, _SERVER_KEYS, where, problems)
    tools_raw = entry.get("tools") or {}
    if not isinstance(tools_raw, Mapping):
        problems.append(f"{where}.tools: expected a mapping of tool name -> options, got {_shown(tools_raw)}")
        tools_raw = {}
    tools = {
        tool: _build(ToolOptions, opts or {}, f"{where}, tool '{tool}'", problems)
        for tool, opts in tools_raw.items()
    }
    options = _build(ToolOptions, {k: entry[k] for k in _OPTION_KEYS if k in entry}, where, problems)
    enabled = entry.get("enabled")
    if enabled is not None and not _is_str_list(enabled):
        problems.append(f"{where}.enabled: expected a list of tool names, got {_shown(enabled)}")
        enabled = None
    enabled = tuple(enabled) if enabled is not None else None
    return _server(name, entry, where, base_dir, problems, options=options, tools=tools, enabled=enabled)


def _parse_mcp_servers(servers: Any, base_dir: Path, problems: list[str]) -> tuple[ServerConfig, ...]:
    if not isinstance(servers, Mapping):
        problems.append(f"mcpServers: expected a mapping of server name -> settings, got {_shown(servers)}")
        return ()
    parsed = []
    for name, entry in servers.items():
        where = f"mcpServers.{name}"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: expected a mapping with command (or url), got {_shown(entry)}")
        elif not entry.get("disabled", False):
            parsed.append(_server(str(name), entry, where, base_dir, problems))
    return tuple(parsed)


def _server(
    name: str, entry: Mapping[str, Any], where: str, base_dir: Path, problems: list[str], **extra: Any
) -> ServerConfig:
    """The transport fields, shared by both formats."""
    command, url = entry.get("command"), entry.get("url")
    kind = str(entry.get("type", entry.get("transport", ""))).lower()
    if kind == "sse":
        problems.append(
            f"{where}.type: the SSE transport is not supported; serve the tool over streamable HTTP or stdio"
        )
    if bool(command) == bool(url):
        problems.append(f"{where}: give exactly one of 'command' (a stdio server) or 'url' (streamable HTTP)")
    for key, check, expected in (
        ("command", lambda v: isinstance(v, str), "a string"),
        ("url", lambda v: isinstance(v, str), "a string"),
        ("cwd", lambda v: isinstance(v, str), "a string"),
        ("args", _is_str_list, "a list of strings"),
        ("env", _is_scalar_map, "a mapping of strings"),
        ("headers", _is_scalar_map, "a mapping of strings"),
    ):
        if entry.get(key) is not None and not check(entry[key]):
            problems.append(f"{where}.{key}: expected {expected}, got {_shown(entry[key])}")
    cwd, args = entry.get("cwd"), entry.get("args")
    return ServerConfig(
        name=name,
        command=command if isinstance(command, str) and command else None,
        args=tuple(args) if _is_str_list(args) else (),
        env=_str_map(entry.get("env")),
        cwd=str(base_dir / cwd) if isinstance(cwd, str) else None,
        url=url if isinstance(url, str) and url else None,
        headers=_str_map(entry.get("headers")),
        **extra,
    )


def _parse_function(entry: Any, index: int, problems: list[str]) -> FunctionConfig:
    where = f"functions[{index}]"
    if isinstance(entry, str) or callable(entry):
        entry = {"function": entry}
    if not isinstance(entry, Mapping):
        problems.append(f"{where}: expected 'module:function', a function, or a mapping with 'function'")
        return FunctionConfig(target="")
    _check_keys(entry, _FUNCTION_KEYS, where, problems)
    target = entry.get("function")
    if not (callable(target) or (isinstance(target, str) and ":" in target)):
        problems.append(
            f"{where}.function: expected 'module:function' (e.g. 'mypackage.tools:search'), got {_shown(target)}"
        )
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        problems.append(f"{where}.name: expected a string, got {_shown(name)}")
    opts = _build(
        ToolOptions, {k: v for k, v in entry.items() if k not in ("function", "name")}, where, problems
    )
    return FunctionConfig(target=target if target is not None else "", name=name, options=opts)


def _build(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    """Build a dataclass, folding its problems (prefixed with `where`) into `problems`."""
    if not isinstance(data, Mapping):
        problems.append(f"{where}: expected a mapping, got {_shown(data)}")
        return cls()
    try:
        return build(cls, data)
    except ConfigError as exc:
        problems.extend(f"{where}: {p}" for p in exc.problems)
        return cls()


def _check_keys(entry: Mapping[str, Any], valid: tuple[str, ...], where: str, problems: list[str]) -> None:
    for key in entry:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
            problems.append(f"{where}: unknown key '{key}'; {hint}")


def _check_unique_names(servers: tuple[ServerConfig, ...], problems: list[str]) -> None:
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            problems.append(f"server '{server.name}': two servers have this name; names must be unique")
        seen.add(server.name)


def _list(data: Mapping[str, Any], key: str, problems: list[str]) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        problems.append(f"{key}: expected a list, got {type(value).__name__}")
        return []
    return value


def _shown(value: Any) -> str:
    """A value quoted in a problem: cut in depth and length, so a hostile file's value cannot make the
    message huge or its repr recurse too deeply."""
    return reprlib.repr(value)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _str_map(value: Any) -> dict[str, str]:
    """Environment and header values written as YAML numbers or booleans become strings."""
    return (
        {str(k): str(v) for k, v in value.items()}
        if isinstance(value, Mapping) and _is_scalar_map(value)
        else {}
    )


def _is_scalar_map(value: Any) -> bool:
    return value is None or (
        isinstance(value, Mapping) and all(isinstance(v, (str, int, float, bool)) for v in value.values())
    )
