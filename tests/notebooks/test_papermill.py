"""CI runs the four notebooks in order with papermill on their small defaults, as `make demo` does."""

import json

import pytest

from rlfactory_nb.notebooks_run import NOTEBOOKS, run_notebooks

from .conftest import CELL_TIMEOUT_S

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1800)
def test_all_four_notebooks_execute_in_order(executed_notebooks):
    """The session's one in-kernel papermill run (tests/notebooks/conftest.py), as `make demo` runs them.
    Slow: four kernels in turn, 03 trains and 04 evaluates; the first reader of `executed_notebooks` pays for
    it."""
    executed = executed_notebooks
    tmp_path = executed[0].parent
    assert [path.name for path in executed] == list(NOTEBOOKS)
    for path in executed:
        notebook = json.loads(path.read_text())
        errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"{path.name}: {errors}"
        assert path.with_suffix(".html").stat().st_size > 10_000
    checkpoints = list((tmp_path / "runs" / "calculator-notebook" / "checkpoints").glob("step_*"))
    assert checkpoints, "notebook 03 trained no checkpoint for 04 to evaluate"
    stepper_html = (tmp_path / "01_setup_tools.html").read_text()
    assert "rf-trained" in stepper_html and "rf-masked" in stepper_html  # static snapshots made it to HTML


@pytest.mark.timeout(2400)
def test_notebooks_step_score_and_evaluate_on_a_local_ray_cluster(tmp_path, tiny_policy):
    """The same four notebooks with `cluster_address`: 01 steps, 02 samples and 04 evaluates on engine
    actors of a local Ray this test starts (the kernels join it; 03 launches its job there too).
    Slow: a local Ray, then four kernels in turn that join it and start engine actors (about 3 minutes)."""
    import ray

    from rlfactory_nb.cluster import Cluster
    from rlfactory_nb.cluster.engines import ENGINE_PREFIX

    cluster = Cluster.connect(num_cpus=2, dashboard=False)
    try:
        address = ray.get_runtime_context().gcs_address
        executed = run_notebooks(tmp_path, {"eval_size": 2, "cluster_address": address}, html=False, timeout_s=CELL_TIMEOUT_S)
        for path in executed:
            notebook = json.loads(path.read_text())
            errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
            assert not errors, f"{path.name}: {errors}"
            source = "".join("".join(c["source"]) for c in notebook["cells"])
            assert f"cluster_address = {json.dumps(address)}" in source  # papermill injected it
        engines = [a for a in ray._private.state.actors().values() if a["Name"].startswith(ENGINE_PREFIX)]
        assert len(engines) >= 4  # 01: one, 02: one, 04: the trained model and the base
        assert {a["State"] for a in engines} == {"DEAD"}  # each freed when its kernel ended
    finally:
        cluster.shutdown()
