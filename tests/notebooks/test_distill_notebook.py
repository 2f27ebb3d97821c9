"""Notebook 05 (fine-tune, distil, then GRPO) runs under papermill on its small defaults, in a kernel
that sees a base install, as `make test` runs it; `make demo` leaves it out (notebooks_run.py)."""

import json
import os

import pytest
from base_install import hide_extras_env

from rlfactory_nb.notebooks_run import TEST_ONLY_NOTEBOOKS, run_notebooks

from .conftest import CELL_TIMEOUT_S

pytestmark = pytest.mark.slow

STAGES = ("student", "teacher", "sft", "distill", "grpo")
"""the held-out reports the notebook keeps, in order; its last cell prints one line each"""


@pytest.fixture
def base_install_kernels(tmp_path_factory):
    hide = hide_extras_env(tmp_path_factory.mktemp("base-install"))
    before = {key: os.environ.get(key) for key in hide}
    os.environ.update(hide)
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.mark.timeout(1200)
def test_the_distillation_notebook_trains_three_stages_and_compares_them(tmp_path, tiny_policy, base_install_kernels):
    """Slow: one kernel fine-tunes, distils and trains the tiny student, evaluating after each stage
    (about a minute on 2 quiet cores)."""
    (executed,) = run_notebooks(tmp_path, {"eval_size": 4}, notebooks=TEST_ONLY_NOTEBOOKS, html=False, timeout_s=CELL_TIMEOUT_S)
    notebook = json.loads(executed.read_text())
    outputs = [output for cell in notebook["cells"] for output in cell.get("outputs", [])]
    errors = [output for output in outputs if output["output_type"] == "error"]
    assert not errors, errors
    runs = tmp_path / "runs"
    for stage in ("sft", "distill", "grpo"):
        assert list((runs / f"distill-notebook-{stage}" / "checkpoints").glob("step_*")), f"{stage}: no checkpoint"
    metrics = [json.loads(line) for line in (runs / "distill-notebook-distill" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in metrics] == [1, 2]  # the defaults' distill_steps
    assert all(row["distill/reverse_kl"] > 0 and row["distill/teacher_s"] > 0 for row in metrics)
    printed = "".join("".join(output.get("text", "")) for output in outputs if output["output_type"] == "stream")
    table = [line.split(":")[0].strip() for line in printed.splitlines() if "greedy" in line and "sampled" in line]
    assert table == list(STAGES)
    text = executed.read_text()
    assert "teacher minus student" in text  # the distilled rollout coloured by the teacher-student gap
    assert executed.stat().st_size < 1_000_000
