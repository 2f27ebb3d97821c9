"""Tool config parsing: our YAML and the mcpServers JSON, and errors that name what is wrong."""

import json
import sys

import pytest
import yaml

from rlfactory_nb.config import ConfigError
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.config import load_tools_config, python_command


def test_both_formats_of_the_calculator_example_describe_the_same_server(repo_root):
    ours = load_tools_config(repo_root / "examples/calculator/tools.yaml").servers
    theirs = load_tools_config(repo_root / "examples/calculator/mcp_servers.json").servers
    assert [(s.name, s.command, s.args, s.transport) for s in ours] == [
        (s.name, s.command, s.args, s.transport) for s in theirs
    ]


async def test_both_formats_start_the_same_tools(repo_root):
    specs = []
    for name in ("tools.yaml", "mcp_servers.json"):
        async with ToolSet.from_config(repo_root / "examples/calculator" / name) as tools:
            specs.append([(s.name, s.input_schema["properties"]) for s in tools.specs])
            assert (await tools.call("calculator", {"expression": "6*7"})).content == "42"
    assert specs[0] == specs[1] == [("calculator", {"expression": {"title": "Expression", "type": "string"}})]


def test_mcp_servers_json_is_read_unchanged(tmp_path):
    desktop = {
        "mcpServers": {
            "files": {
                "command": "npx",
                "args": ["-y", "server-files", "/tmp"],
                "env": {"DEBUG": 1},
                "autoApprove": [],
            },
            "remote": {
                "type": "streamable-http",
                "url": "http://localhost:9000/mcp",
                "headers": {"X-Key": "k"},
            },
            "old": {"command": "old-server", "disabled": True},
        }
    }
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(desktop))
    servers = {s.name: s for s in load_tools_config(path).servers}
    assert set(servers) == {"files", "remote"}
    assert servers["files"].args == ("-y", "server-files", "/tmp") and servers["files"].env == {"DEBUG": "1"}
    assert servers["remote"].transport == "http" and servers["remote"].headers == {"X-Key": "k"}


def test_our_format_with_per_tool_options_and_settings(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "servers": [
                    {
                        "name": "calc",
                        "command": "python",
                        "args": ["-m", "x"],
                        "cwd": "work",
                        "timeout_s": 7,
                        "enabled": ["calculator"],
                        "tools": {"calculator": {"timeout_s": 2, "cache": False, "description": "Adds."}},
                    }
                ],
                "functions": [
                    "os.path:join",
                    {"function": "os.path:basename", "name": "base", "timeout_s": 1},
                ],
                "settings": {"max_result_chars": 100, "cache": False},
            }
        )
    )
    parsed = load_tools_config(path, max_concurrency=3)
    (server,) = parsed.servers
    assert server.cwd == str(tmp_path / "work")  # relative to the config file
    assert server.tool_options("calculator").timeout_s == 2
    assert server.tool_options("calculator").description == "Adds."
    assert server.tool_options("other").timeout_s == 7  # the server-level default
    assert [f.name for f in parsed.functions] == [None, "base"]
    assert (parsed.settings.max_result_chars, parsed.settings.max_concurrency, parsed.settings.cache) == (
        100,
        3,
        False,
    )


def test_python_means_the_running_interpreter():
    assert python_command("python") == python_command("python3") == sys.executable
    assert python_command("/usr/bin/node") == "/usr/bin/node"


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"servers": [{"name": "calc", "comand": "python"}]},
            "server 'calc': unknown key 'comand'; did you mean 'command'",
        ),
        ({"servers": [{"name": "calc"}]}, "server 'calc': give exactly one of 'command'"),
        ({"servers": [{"command": "python"}]}, "servers[0].name"),
        (
            {"servers": [{"name": "calc", "command": "python", "args": "-m x"}]},
            "server 'calc'.args: expected a list",
        ),
        (
            {"servers": [{"name": "c", "command": "p", "tools": {"t": {"timeout": 3}}}]},
            "server 'c', tool 't': timeout: unknown key",
        ),
        (
            {"servers": [{"name": "c", "command": "p", "tools": {"t": {"timeout_s": "soon"}}}]},
            "tool 't': timeout_s: expected",
        ),
        (
            {"servers": [{"name": "a", "command": "p"}, {"name": "a", "command": "q"}]},
            "server 'a': two servers",
        ),
        (
            {"mcpServers": {"web": {"type": "sse", "url": "http://x/sse"}}},
            "mcpServers.web.type: the SSE transport",
        ),
        ({"functions": ["no_colon"]}, "functions[0].function: expected 'module:function'"),
        ({"servers": [], "setings": {}}, "did you mean 'settings'"),
        ({"settings": {"max_concurency": 3}}, "did you mean"),
    ],
)
def test_errors_name_the_server_or_tool_and_the_field(config, message):
    with pytest.raises(ConfigError) as info:
        load_tools_config(config)
    assert message in str(info.value)


def test_a_function_that_cannot_be_imported_is_a_config_error():
    with pytest.raises(ConfigError, match=r"functions\[0\].*no_such_module"):
        ToolSet.from_config({"functions": ["no_such_module:f"]})


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_tools_config(tmp_path / "nope.yaml")
