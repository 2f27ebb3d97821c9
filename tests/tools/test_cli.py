"""`rlfactory-nb tools list|call`, run through the tools CLI's own entry point."""

import json

from rlfactory_nb.cli.tools import main


def test_list_prints_each_tool_with_its_parameters(repo_root, capsys):
    assert main(["tools", "list", str(repo_root / "examples/calculator/tools.yaml")]) == 0
    out = capsys.readouterr().out
    assert "calculator(expression: string)  [calculator]" in out


def test_call_prints_the_result_and_exits_nonzero_on_errors(repo_root, capsys):
    config = str(repo_root / "examples/calculator/mcp_servers.json")
    assert main(["call", config, "calculator", '{"expression": "123*456"}']) == 0
    assert capsys.readouterr().out.strip() == "56088"
    assert main(["call", config, "calculator", '{"expression": "1/0"}', "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["content"]) == ("error", "error: division by zero")


def test_a_bad_config_is_reported_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "tools.yaml"
    bad.write_text("servers:\n  - name: calc\n    comand: python\n")
    assert main(["list", str(bad)]) == 2
    assert "did you mean 'command'" in capsys.readouterr().err
