"""The user's files and objects travel with a job (cluster/shipping.py, data/objects.py).

Fast: how the runtime_env is built (relative paths, staged outside files, modules only the kernel can
import) and what fails in the cell before anything starts. Slow: a job launched from a folder that is
deleted right after `launch` returns (as on a cluster whose nodes do not share the kernel's disk) still
finds its tools module, tools file, reward file and dataset; and objects from the kernel train.
"""

import json
import shutil
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launch
from rlfactory_nb.cluster.preflight import absolute_paths
from rlfactory_nb.cluster.shipping import ShippingError, runtime_env, unstage
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import ObjectTransferError

ROOT = Path(__file__).resolve().parents[2]


def project(folder: Path) -> Path:
    """A user's project: a tools module used by its tools file, a reward file and a dataset."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mytools.py").write_text(textwrap.dedent('''
        def shout(text: str) -> str:
            """Upper-case text.

            Args:
                text: what to shout
            """
            return text.upper()
    '''))
    (folder / "tools.yaml").write_text(
        "servers:\n  - name: calculator\n    command: python\n    args: ['-m', 'rlfactory_nb.tools.servers.calculator']\n"
        "functions:\n  - mytools:shout\nsettings:\n  max_result_chars: 1000\n"
    )
    (folder / "myreward.py").write_text("def half(sample):\n    return 0.5\n")
    rows = [{"prompt": f"What is {i}*3?", "ground_truth": str(3 * i)} for i in range(4)]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def config(output_dir: Path, name: str, **overrides) -> RunConfig:
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": name, "output_dir": str(output_dir), "tools.config": "tools.yaml",
            "reward.function": "myreward.py:half", "data.train": "train.jsonl", "grpo.steps": 1,
            "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0, "grpo.checkpoint_every": 0,
            "rollout.max_new_tokens": 16, **overrides,
        },
    )


def test_paths_in_the_project_become_relative_and_outside_files_are_staged(tmp_path, monkeypatch):
    inside = project(tmp_path / "proj")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "eval.jsonl").write_text((inside / "train.jsonl").read_text())
    monkeypatch.chdir(inside)
    cfg = config(tmp_path / "runs", "x", **{"data.eval": str(outside / "eval.jsonl")}).replace(
        {"tools.config": str(inside / "tools.yaml")}
    )
    monkeypatch.syspath_prepend(str(inside))  # the kernel imports mytools; a fresh worker would via working_dir
    env, driver_cfg, staged = runtime_env(cfg, inside)
    assert env["working_dir"] == str(inside) and driver_cfg.tools.config == "tools.yaml"
    assert driver_cfg.reward.function == "myreward.py:half" and list(staged) == ["data.eval"]
    package = Path(env["py_modules"][0])
    assert (package / staged["data.eval"].split("/", 1)[1]).read_text() == (inside / "train.jsonl").read_text()
    monkeypatch.syspath_prepend(str(package.parent))  # what Ray does with a py_modules folder
    assert unstage(driver_cfg, staged).data.eval == str(package / staged["data.eval"].split("/", 1)[1])


def test_a_run_folder_in_the_output_dir_keeps_its_absolute_path(tmp_path, monkeypatch):
    """`sft.data: runs/<earlier run>`: the output dir is not shipped, so a path into it made relative
    would name nothing in the driver's working directory; it stays absolute (and is not staged)."""
    inside = project(tmp_path / "proj")
    (inside / "runs" / "earlier" / "trajectories").mkdir(parents=True)
    monkeypatch.chdir(inside)
    monkeypatch.syspath_prepend(str(inside))
    cfg = absolute_paths(config(inside / "runs", "x", **{"sft.data": "runs/earlier"}))
    env, driver_cfg, staged = runtime_env(cfg, inside)
    assert driver_cfg.sft.data == str(inside / "runs" / "earlier") and "sft.data" not in staged
    assert "/runs" in env["excludes"] and driver_cfg.data.train == "train.jsonl"


def test_an_environment_file_outside_the_project_is_staged_with_its_class(tmp_path, monkeypatch):
    """`rollout.env: path/to/file.py:Class` names a file the job's workers must read, as a reward file is."""
    inside = project(tmp_path / "proj")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "myenv.py").write_text("from rlfactory_nb.envs.base import Environment\n\nclass Quiet(Environment):\n    pass\n")
    monkeypatch.chdir(inside)
    cfg = config(tmp_path / "runs", "x", **{"rollout.env": f"{outside / 'myenv.py'}:Quiet"})
    env, driver_cfg, staged = runtime_env(cfg, inside)
    assert list(staged) == ["rollout.env"] and staged["rollout.env"].endswith("myenv.py")
    package = Path(env["py_modules"][0])
    monkeypatch.syspath_prepend(str(package.parent))  # what Ray does with a py_modules folder
    shipped = unstage(driver_cfg, staged).rollout.env
    assert shipped.endswith(":Quiet") and Path(shipped.rsplit(":", 1)[0]).read_text() == (outside / "myenv.py").read_text()


def test_a_module_only_the_kernel_can_import_is_shipped(tmp_path, monkeypatch):
    inside = project(tmp_path / "proj")
    library = tmp_path / "lib"
    library.mkdir()
    shutil.move(str(inside / "mytools.py"), library / "mytools.py")
    monkeypatch.syspath_prepend(str(library))  # sys.path.append in a notebook: workers lack it
    monkeypatch.chdir(inside)
    env, _, _ = runtime_env(config(tmp_path / "runs", "x"), inside)
    assert env["py_modules"] == [str(library / "mytools.py")]


def test_what_cannot_travel_fails_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(project(tmp_path / "proj"))
    lock = threading.Lock()

    def guarded(sample):
        with lock:
            return 1.0

    with pytest.raises(ObjectTransferError, match="reward 'guarded' cannot travel.*'lock'"):
        launch(config(tmp_path / "runs", "x"), None, reward={"guarded": guarded})
    with pytest.raises(rf.rewards.RewardLoadError, match="cannot import module 'nosuchmodule'"):
        launch(config(tmp_path / "runs", "x", **{"reward.function": "nosuchmodule:f"}), None)
    sys.modules["phantom_tools"] = type(sys)("phantom_tools")  # importable here, no file anywhere
    try:
        with pytest.raises(ShippingError, match="module 'phantom_tools'.*no file to ship"):
            runtime_env(config(tmp_path / "runs", "x", **{"reward.function": "phantom_tools:f"}), Path.cwd())
    finally:
        del sys.modules["phantom_tools"]


@pytest.mark.slow
def test_a_job_finds_its_files_after_the_launch_folder_is_gone(tmp_path, monkeypatch, cluster):
    """Slow: two jobs run on the cluster, each a driver actor that unpacks its shipped files and loads the
    model and tools before it trains."""
    folder = project(tmp_path / "launcher")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))  # a kernel has its working directory on sys.path
    job = launch(config(tmp_path / "runs", "shipped"), cluster, linger_s=30)
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(folder)  # nothing on this disk is left for the driver to read
    assert job.wait(timeout_s=400) == "finished", job.logs()
    assert job.metrics()[0]["reward/mean"] == 0.5

    @rf.tool
    def whisper(text: str) -> str:
        """Lower-case text.

        Args:
            text: what to whisper
        """
        return text.lower()

    rows = [{"prompt": "What is 2*2?", "ground_truth": "4"}] * 2
    cfg = RunConfig.from_yaml(ROOT / "examples/calculator/config.yaml", overrides={
        "name": "objects", "output_dir": str(tmp_path / "runs"), "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
        "grpo.steps": 1, "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0,
        "grpo.checkpoint_every": 0, "rollout.max_new_tokens": 16,
    })
    job = launch(cfg, cluster, reward={"quarter": lambda sample: 0.25}, tools=[whisper], train_data=rows, linger_s=30)
    assert job.wait(timeout_s=400) == "finished", job.logs()
    assert job.metrics()[0]["reward/mean"] == 0.25
    assert "whisper" in (job.run_dir / "code" / "tools.py").read_text()


def test_launch_names_every_file_it_reads_by_an_absolute_path_then_ships_it_relative(tmp_path, monkeypatch):
    """cluster/preflight.py and shipping read the same `config_paths`: what the kernel made absolute
    inside the project folder is relative again for the driver, with a reward's `:function` kept."""
    inside = project(tmp_path / "proj")
    monkeypatch.chdir(inside)
    cfg = absolute_paths(config(tmp_path / "runs", "x"))
    assert cfg.reward.function == f"{inside}/myreward.py:half" and cfg.data.train == str(inside / "train.jsonl")
    assert cfg.tools.config == str(inside / "tools.yaml") and cfg.output_dir == str(tmp_path / "runs")
    assert cfg.model.name == "tiny-calculator" and cfg.data.eval == "synthetic:calculator-heldout"
    monkeypatch.syspath_prepend(str(inside))
    _, driver_cfg, staged = runtime_env(cfg, inside)
    assert (driver_cfg.reward.function, driver_cfg.data.train, driver_cfg.tools.config) == ("myreward.py:half", "train.jsonl", "tools.yaml")
    assert not staged
