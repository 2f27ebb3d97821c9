"""One dispatch finds the view for an object; core modules never import a widget module."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rlfactory_nb.eval import EvalReport
from rlfactory_nb.types import Trajectory
from rlfactory_nb.widgets import TrajectoryView, view_for
from rlfactory_nb.widgets.eval import CHARTED

PACKAGE = Path(__file__).resolve().parents[2] / "rlfactory_nb"


def widget_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else []
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}" for name in names if name.startswith("rlfactory_nb.widgets")]
    return found


def test_core_modules_never_import_a_widget_module():
    core = [path for path in PACKAGE.rglob("*.py") if "widgets" not in path.relative_to(PACKAGE).parts]
    assert [line for path in core for line in widget_imports(path)] == []


def test_importing_the_core_loads_no_widget_library():
    code = (
        "import sys, rlfactory_nb.types, rlfactory_nb.eval, rlfactory_nb.reward_lab, rlfactory_nb.tools.toolset, "
        "rlfactory_nb.cluster.jobs; print(sorted(m for m in ('ipywidgets', 'plotly', 'rlfactory_nb.widgets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_view_dispatches_by_type_with_options(tokenizer):
    traj = Trajectory(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1], logprobs=[-0.1], id="t")
    view = traj.view(tokenizer)
    assert isinstance(view, TrajectoryView) and view.tokenizer is tokenizer
    assert isinstance(view_for(traj), TrajectoryView) and "traj.view(policy.tokenizer)" in view_for(traj).strip.value
    report = EvalReport("base", 0.5, 0.25, 1.0, 1.0, 0.0, 1.0, rows=[])
    for view in (report.view(), report.compare(report).view()):
        assert "<b>base</b>" in view.static_html() and view.children[1].data[0].x == CHARTED


def test_an_object_without_a_view_is_told_which_types_have_one():
    with pytest.raises(TypeError, match="no view is registered for int; views exist for: .*Trajectory"):
        view_for(3)
