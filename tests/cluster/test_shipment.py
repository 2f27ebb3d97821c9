"""A launched job says in one line of its repr what it shipped (cluster/shipment.py)."""

from pathlib import Path

from rlfactory_nb.cluster import TrainingJob
from rlfactory_nb.cluster.shipment import shipment_summary
from rlfactory_nb.cluster.shipping import runtime_env
from rlfactory_nb.config import RunConfig
from rlfactory_nb.train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]


def test_the_summary_counts_the_project_folder_and_the_staged_files(tmp_path):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: main")  # excluded, as shipping excludes it
    (project / "notes.md").write_text("x" * 300_000)
    (project / "reward.py").write_text("def reward(sample):\n    return 1.0\n")
    cfg = RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={"output_dir": str(tmp_path / "runs"), "tools.config": str(ROOT / "examples/calculator/tools.yaml")},
    )
    env, _, staged = runtime_env(cfg, project)
    assert shipment_summary(env, staged) == "shipped: project folder 293 KiB (2 files), 1 staged file"


def test_a_jobs_repr_ends_with_what_it_shipped(tmp_path):
    RunFolder(tmp_path / "demo").write_status(state="running", step=1, steps=4)
    job = TrainingJob("demo", tmp_path / "demo", shipped="shipped: project folder 12 KiB (3 files)")
    assert repr(job).endswith("step 1/4, " + str(tmp_path / "demo") + ", shipped: project folder 12 KiB (3 files))")
    assert "shipped" not in repr(TrainingJob.attach("demo", output_dir=tmp_path))  # attached: not known
