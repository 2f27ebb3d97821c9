"""The researcher's flow, end to end: notebook 02 designs a reward in a cell and hands it over,
notebook 03 trains with it and a cell-defined @rf.tool on a local Ray, then a new kernel attaches to
the run, resumes it for one more step and evaluates it, with nothing but the run folder."""

import json

import nbformat
import papermill
import pytest

from rlfactory_nb.notebooks_run import notebooks_dir, run_notebooks

from .conftest import CELL_TIMEOUT_S

pytestmark = pytest.mark.slow

NEW_KERNEL = '''
import rlfactory_nb as rf

cluster = rf.Cluster.connect()
job = rf.TrainingJob.attach("flow", cluster, output_dir=output_dir)
cfg = rf.example("calculator").config({"name": "flow", "output_dir": output_dir, "grpo.steps": 4,
                                       "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0,
                                       "grpo.checkpoint_every": 0})
job = rf.launch(cfg, cluster, resume=True)
assert job.wait() == "finished", job.logs()
report = rf.evaluate_sync(job.checkpoints[-1], None, cfg, limit=4, run_dir=job.run_dir)
print(json.dumps({"steps": [row["step"] for row in job.metrics()], "rows": len(report.rows)}))
cluster.shutdown()
'''


@pytest.mark.timeout(1800)
def test_lab_reward_and_cell_tool_train_then_a_new_kernel_resumes_and_evaluates(tmp_path, tiny_policy):
    """Slow: three kernels in turn (02, 03, a new one), each starting a local Ray or a job on it."""
    parameters = {"run_name": "flow", "steps": 2, "prompts_per_step": 2, "group_size": 2, "n_prompts": 2,
                  "eval_size": 4, "use_cell_tool": True}
    run_notebooks(
        tmp_path, parameters, notebooks=("02_reward_design.ipynb", "03_train_grpo.ipynb"), html=False,
        timeout_s=CELL_TIMEOUT_S,
    )
    code = tmp_path / "runs" / "flow" / "code"
    reward_source = (code / "reward.py").read_text()
    assert "def shaped" in reward_source  # the cell of notebook 02
    assert "def used_tool" in reward_source and "import rlfactory_nb as rf" in reward_source  # the helper it calls
    assert "Partial credit" in reward_source  # the used_tool the lab rescored with (notebook 02 redefines it)
    assert "objects.pkl, in this folder" in reward_source
    assert "def digit_count" in (code / "tools.py").read_text()  # the cell of notebook 03
    from rlfactory_nb.config import RunConfig

    (checkpoint,) = sorted((tmp_path / "runs" / "flow" / "checkpoints").glob("step_*"))[-1:]
    recorded = RunConfig.from_yaml(checkpoint / "run_config.yaml")
    assert recorded.reward.function == "objects.pkl:shaped"  # not the config's exact_match, which never ran
    assert [entry["name"] for entry in recorded.kernel_objects["reward"]] == ["shaped"]
    assert [entry["name"] for entry in recorded.kernel_objects["tools"]] == ["digit_count"]
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.cells = [nbformat.v4.new_code_cell("output_dir = ''", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell("import json\n" + NEW_KERNEL)]
    source = tmp_path / "new_kernel.ipynb"
    nbformat.write(notebook, source)
    papermill.execute_notebook(str(source), str(tmp_path / "new_kernel_out.ipynb"), parameters={"output_dir": str(tmp_path / "runs")},
                               cwd=str(notebooks_dir()), kernel_name="python3", progress_bar=False)
    outputs = [o for c in nbformat.read(tmp_path / "new_kernel_out.ipynb", 4).cells for o in c.get("outputs", [])]
    result = json.loads([o["text"] for o in outputs if o.get("name") == "stdout"][-1].strip().splitlines()[-1])
    assert result == {"steps": [1, 2, 3, 4], "rows": 4}
