"""Every shipped example through notebooks 01 and 02: the demo prompt and the call tried by hand
are the example's own (no `unknown_tool`), and the lab scores with the example's rewards, none of
another example's (examples/<name>/notebook.yaml)."""

import json
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.notebooks_run import run_notebooks

from .conftest import CELL_TIMEOUT_S

pytestmark = pytest.mark.slow

EXAMPLES = ("calculator", "gsm8k", "nl2sql", "deepsearch")
NOTEBOOKS = ("01_setup_tools.ipynb", "02_reward_design.ipynb")


def tagged_output(path, tag: str) -> str:
    cells = json.loads(path.read_text())["cells"]
    (cell,) = [c for c in cells if tag in c.get("metadata", {}).get("tags", [])]
    texts = []
    for output in cell.get("outputs", []):
        texts.append(output.get("text", "") if "text" in output else output.get("data", {}).get("text/plain", ""))
    return "".join("".join(t) if isinstance(t, list) else t for t in texts)


def test_every_example_declares_notebook_defaults_that_fit_it():
    """Fast twin of the slow test below: the call names a tool of the example, the first lab reward
    is the one its config trains with."""
    for name in EXAMPLES:
        example = rf.example(name)
        defaults = example.notebook
        tools_file = Path(example.config().tools.config).read_text()
        assert f"{defaults.tool_call['name']}:" in tools_file, f"{name}: no tool {defaults.tool_call['name']!r}"
        assert next(iter(defaults.lab_rewards.values())) == example.config().reward.function, name
        assert example.demo_messages()[-1] == {"role": "user", "content": defaults.demo_prompt}
        assert example.eval_rows(2)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", EXAMPLES)
def test_notebooks_01_and_02_serve_the_example(name, tmp_path, tiny_policy):
    parameters = {"example": name, "n_prompts": 2, "group_size": 2, "max_new_tokens": 32}
    executed = run_notebooks(tmp_path, parameters, notebooks=NOTEBOOKS, html=False, timeout_s=CELL_TIMEOUT_S)
    for path in executed:
        errors = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"{name} {path.name}: {errors}"
    by_hand = tagged_output(executed[0], "tool-call-by-hand")
    assert "unknown_tool" not in by_hand and "status='ok'" in by_hand, by_hand
    example_rewards = list(rf.example(name).notebook.lab_rewards)
    (line,) = [line for line in tagged_output(executed[1], "lab-rewards").splitlines() if line.startswith("lab rewards:")]
    assert line == "lab rewards: " + ", ".join([*example_rewards, "used_tool", "shaped"]), line


def test_notebook_03_shows_what_the_config_changes_not_the_whole_yaml():
    example = rf.example("calculator")
    changes = example.changes(example.config({"grpo.steps": 2, "model.lora": {"rank": 4, "alpha": 8}}))
    assert [key for key, _, _ in changes.rows] == ["grpo.steps", "model.lora"]
    assert repr(changes).splitlines()[1] == "  grpo.steps: 40 -> 2" and len(repr(changes).splitlines()) == 3
    assert "<code>grpo.steps</code>" in changes._repr_html_()
    assert "unchanged" in repr(example.changes(example.config()))
