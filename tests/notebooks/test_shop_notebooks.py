"""Notebooks 03 and 04 with `example="shop"`: the job trains on a local Ray with one shop episode
(its own SQLite database and customer) per trajectory, and 04 scores the run's checkpoint on the
shop's held-out customers with the episode's own reward."""

import json
import re

import pytest

from rlfactory_nb.notebooks_run import run_notebooks
from rlfactory_nb.train.run_folder import read_metrics

from .conftest import CELL_TIMEOUT_S
from .test_every_example import tagged_output

pytestmark = pytest.mark.slow

NOTEBOOKS = ("03_train_grpo.ipynb", "04_eval.ipynb")


def html_of(path, cell_id: str) -> str:
    (cell,) = [c for c in json.loads(path.read_text())["cells"] if c.get("id") == cell_id]
    return "".join("".join(o.get("data", {}).get("text/html", "")) for o in cell.get("outputs", []))


@pytest.mark.timeout(1800)
def test_notebooks_03_and_04_train_and_evaluate_the_shop(tmp_path, tiny_policy):
    """Slow: a local Ray, a 2-step job and one resumed step (03), then 04 (about 70 s on 2 cores)."""
    parameters = {"example": "shop", "run_name": "shop-notebook", "steps": 2, "prompts_per_step": 2, "group_size": 2, "eval_size": 2}
    executed = run_notebooks(tmp_path, parameters, notebooks=NOTEBOOKS, html=False, timeout_s=CELL_TIMEOUT_S)
    for path in executed:
        errors = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"{path.name}: {errors}"
    metrics = read_metrics(tmp_path / "runs" / "shop-notebook")
    assert [row["step"] for row in metrics] == [1, 2, 3]  # two steps, then 03's resumed one
    # every step ran shop episodes where the job ran (2 prompts x 2), closed them, and trained on their reward
    assert all(row["env/episodes_opened"] == row["env/episodes_closed"] == 4 and "reward/env" in row for row in metrics)
    assert tagged_output(executed[0], "03-06b").startswith("reward: env (logged beside: exact_match)")
    assert "scored by: env, exact_match" in tagged_output(executed[1], "04-02")
    # the held-out customer whose order has shipped: the goal is the untouched database, which the
    # tiny model leaves in place, but it never tells the customer which order, its status and that it
    # cannot be cancelled, so the episode's reward is 0 (a silent agent earned 1 here before)
    table = html_of(executed[1], "04-04")
    (row,) = [r for r in re.findall(r"<tr>.*?</tr>", table, re.DOTALL) if "<td>nothing changes: the order has shipped</td>" in r]
    _index, sampled, greedy, _calls = re.findall(r"<td class='rf-num'>([^<]*)</td>", row)
    assert (sampled, greedy) == ("0.000", "0.000"), row
    assert "environment reward" in html_of(executed[1], "04-05")  # the view shows the episode, customer turns included
