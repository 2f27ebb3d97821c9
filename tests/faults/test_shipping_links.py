"""Shipping checks what Ray will really zip: symlinks are followed (Ray's packaging follows them), so
the size check follows them too, a symlink loop fails in the cell, and the staged copy of outside
files is removed once uploaded. Tiny folders; the big file is sparse (no disk)."""

from pathlib import Path

import pytest

from rlfactory_nb.cluster import shipping
from rlfactory_nb.cluster.shipping import ShippingError, runtime_env
from rlfactory_nb.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
ROW = '{"prompt": "What is 2+2?", "ground_truth": "4"}\n'


def tiny_project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "myreward.py").write_text("def half(sample):\n    return 0.5\n")
    (folder / "train.jsonl").write_text(ROW)
    return folder


def config(tmp_path: Path, **overrides) -> RunConfig:
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": "links",
            "output_dir": str(tmp_path / "runs"),
            "tools.config": None,
            "reward.function": "myreward.py:half",
            "data.train": "train.jsonl",
            **overrides,
        },
    )


def sparse_file(path: Path, size: int = 1024**3) -> Path:
    with path.open("wb") as file:
        file.truncate(size)
    return path


def test_a_symlink_to_a_big_file_counts_in_the_project_size(tmp_path, monkeypatch):
    project = tiny_project(tmp_path / "proj")
    (project / "big").symlink_to(sparse_file(tmp_path / "huge.bin"))
    monkeypatch.chdir(project)
    with pytest.raises(ShippingError, match=r"1024 MiB.*big"):
        runtime_env(config(tmp_path), project)


def test_a_symlinked_folder_counts_in_the_project_size(tmp_path, monkeypatch):
    project = tiny_project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sparse_file(elsewhere / "weights.dat")
    (project / "linked").symlink_to(elsewhere)
    monkeypatch.chdir(project)
    with pytest.raises(ShippingError, match="weights.dat"):
        runtime_env(config(tmp_path), project)


def test_a_symlink_loop_in_a_dataset_folder_fails_naming_it(tmp_path, monkeypatch):
    project = tiny_project(tmp_path / "proj")
    dataset = tmp_path / "saved"
    dataset.mkdir()
    (dataset / "state.json").write_text("{}")
    (dataset / "again").symlink_to(dataset)
    monkeypatch.chdir(project)
    with pytest.raises(ShippingError, match="symlink loop") as info:
        runtime_env(config(tmp_path, **{"data.eval": str(dataset)}), project)
    assert str(dataset / "again") in str(info.value)


def test_the_staged_copy_is_removed_after_upload(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from ray._private.runtime_env import py_modules, working_dir

    project = tiny_project(tmp_path / "proj")
    outside = tmp_path / "eval.jsonl"
    outside.write_text(ROW)
    monkeypatch.chdir(project)
    env, _, staged = runtime_env(config(tmp_path, **{"data.eval": str(outside)}), project)
    package = Path(env["py_modules"][-1])
    assert staged and package.is_dir()
    uploads = []

    class Node:
        def get_runtime_env_dir_path(self):
            return str(tmp_path / "scratch")

    def fake_upload(env, include_gitignore, scratch_dir):
        uploads.append(dict(env))
        return env

    monkeypatch.setattr(ray._private.worker.global_worker, "node", Node(), raising=False)
    monkeypatch.setattr(py_modules, "upload_py_modules_if_needed", fake_upload)
    monkeypatch.setattr(working_dir, "upload_working_dir_if_needed", fake_upload)
    shipping.upload(env)
    assert len(uploads) == 2 and str(package) in uploads[0]["py_modules"]
    assert not package.parent.exists(), "the staging folder outlived the upload"
    assert project.exists() and outside.exists()
