"""A run whose output_dir is a URI (train/run_storage.py): trained in a local folder, copied up after
each step, read back from storage alone, resumed from storage alone. fsspec's memory:// stands in
for an object store (no append, no rename)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from rlfactory_nb.models.checkpoint import CHECKPOINTS, TRAINER_STATE
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.storage import Storage
from rlfactory_nb.train.loop import train_sync
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.train.run_storage import RunUpload


def test_a_run_on_storage_trains_reads_back_and_resumes_from_there_alone(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    uri = f"memory://{uuid.uuid4().hex}/runs"
    cfg = make_cfg(grpo__checkpoint_every=1, grpo__keep_last=1).replace({"output_dir": uri})
    assert cfg.run_dir == f"{uri}/test"

    staging = set(Path(tempfile.gettempdir()).glob("rlfactory-nb-test-*"))
    first = train_sync(cfg)
    assert first.run_dir == cfg.run_dir and first.checkpoint == f"{uri}/test/{CHECKPOINTS}/step_000002"
    # the local folder it trained in is gone once uploaded (issue #44 finding 14): storage is the record
    assert set(Path(tempfile.gettempdir()).glob("rlfactory-nb-test-*")) == staging
    run = RunFolder(cfg.run_dir)
    assert [row["step"] for row in run.metrics()] == [1, 2]
    assert run.checkpoints() == [f"{uri}/test/{CHECKPOINTS}/step_000002"]  # keep_last=1 pruned step 1 there too
    assert run.store.read_text(f"{CHECKPOINTS}/latest").strip() == "step_000002"
    assert len(run.trajectory_records(100)) == 2 * 3 * 4
    policy = Policy.load(run.checkpoints()[-1], device="cpu")  # fetched into this node's cache
    assert policy.path.is_relative_to(tmp_path / "cache")

    resumed = train_sync(cfg.replace({"grpo.steps": 3}), resume=True)
    assert resumed.step == 3
    assert [row["step"] for row in RunFolder(cfg.run_dir).metrics()] == [1, 2, 3]
    assert RunFolder(cfg.run_dir).checkpoints() == [f"{uri}/test/{CHECKPOINTS}/step_000003"]


def test_upload_sends_only_what_changed_and_checkpoints_whole(tmp_path):
    local, store = tmp_path / "run", Storage.at(f"memory://{uuid.uuid4().hex}/run")
    (local / CHECKPOINTS / "step_000001").mkdir(parents=True)
    (local / "metrics.jsonl").write_text('{"step": 1}\n')
    (local / "job.json").write_text("{}")  # the driver writes it to storage itself
    (local / CHECKPOINTS / "step_000001" / "model.safetensors").write_bytes(b"w")  # not yet complete
    upload = RunUpload(local, store)
    assert upload.push() == ["metrics.jsonl"]
    assert upload.push() == []
    (local / CHECKPOINTS / "step_000001" / TRAINER_STATE).write_bytes(b"s")
    (local / CHECKPOINTS / "latest").write_text("step_000001\n")
    with (local / "metrics.jsonl").open("a") as file:
        file.write('{"step": 2}\n')
    assert upload.push() == ["metrics.jsonl", f"{CHECKPOINTS}/step_000001"]
    assert store.read_text(f"{CHECKPOINTS}/latest") == "step_000001\n" and not store.exists("job.json")
    assert RunFolder(str(store)).checkpoints() == [f"{store}/{CHECKPOINTS}/step_000001"]


def test_objects_kept_with_a_run_on_storage_load_from_its_uri(make_cfg, tmp_path):
    """`rf.evaluate(..., run_dir=job.run_dir)` and `job.stepper()` read code/ from a URI."""
    from rlfactory_nb.data.objects import RunObjects

    def half(sample) -> float:
        return 0.5

    uri = f"memory://{uuid.uuid4().hex}/runs/test"
    cfg = make_cfg().replace({"output_dir": uri.rsplit("/", 1)[0]})
    local = tmp_path / "local"
    RunObjects.of(reward=half).save(local, config=cfg)
    Storage.at(uri).put_folder(local / "code", "code")
    assert RunObjects.load(uri).reward(None) == 0.5
    assert RunObjects.resumed(uri, cfg, say=lambda line: None).reward(None) == 0.5
    assert RunObjects.load(f"memory://{uuid.uuid4().hex}/none") is None
