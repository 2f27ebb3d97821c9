"""The job trains the model the kernel inspected (issue 25): presets reach the driver whole, the
driver records the digest of the model it resolved, and another model fails the job before step 1.

The launches run from notebooks/, where every notebook's kernel runs: the package then comes from
the install, not inside the shipped working directory (the case that silently rebuilt the preset).
"""

import shutil
from pathlib import Path

import pytest

from rlfactory_nb.cluster import JobFailed, launch, launcher
from rlfactory_nb.cluster.shipping import runtime_env
from rlfactory_nb.config import RunConfig
from rlfactory_nb.models import presets
from rlfactory_nb.models.files import (
    NO_PRESET_BUILD,
    ModelDigest,
    ModelFilesError,
    local_model_digest,
    model_digest,
    model_folder,
)
from rlfactory_nb.models.presets import shipped

ROOT = Path(__file__).resolve().parents[2]


def one_step_config(tmp_path, name):
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": name, "output_dir": str(tmp_path), "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
            "grpo.steps": 1, "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0,
            "grpo.checkpoint_every": 0, "rollout.max_new_tokens": 16,
        },
    )


def test_digest_tells_weights_from_tokenizer(tmp_path):
    original = presets.preset_path("tiny-calculator")
    copy = Path(shutil.copytree(original, tmp_path / "copy"))
    assert model_digest(copy) == model_digest(original)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert model_digest(copy).differs_from(model_digest(original)) == ["weights"]
    shutil.copy2(original / "model.safetensors", weights)
    (copy / "chat_template.jinja").write_text("{{ messages }}")
    assert model_digest(copy).differs_from(model_digest(original)) == ["tokenizer"]


def test_model_folder_names_the_missing_file_and_the_node(tmp_path):
    with pytest.raises(ModelFilesError, match=f"no model or checkpoint folder {tmp_path / 'absent'} on node"):
        model_folder(tmp_path / "absent")
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "config.json").write_text("{}")
    with pytest.raises(ModelFilesError, match="holds no weight file"):
        model_folder(tmp_path / "partial")
    assert model_folder("Qwen/Qwen3-4B", check_hub=False) == "Qwen/Qwen3-4B"  # a hub id stays a name


def test_a_node_that_may_not_build_refuses_a_partial_preset(tmp_path, monkeypatch):
    partial = Path(shutil.copytree(presets.preset_path("tiny-calculator"), tmp_path / "built" / "tiny-calculator"))
    (partial / "model.safetensors").unlink()
    monkeypatch.setattr(shipped, "BUILT", tmp_path / "built")
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(NO_PRESET_BUILD, "1")
    monkeypatch.setattr(presets, "build_tiny_calculator", lambda *a, **k: pytest.fail("a preset was built"))
    with pytest.raises(ModelFilesError, match=r"on node .* lacks model\.safetensors"):
        model_folder("tiny-calculator")


def test_the_installed_package_does_not_travel_as_a_copy(tmp_path):
    """From notebooks/ the reward names rlfactory_nb, which the workers import from the install:
    shipping a copy of it dropped the preset's weights on the way."""
    env, _, _ = runtime_env(one_step_config(tmp_path, "ship"), ROOT / "notebooks")
    assert not any(Path(module).name == "rlfactory_nb" for module in env.get("py_modules", []))
    assert env["env_vars"][NO_PRESET_BUILD] == "1"


@pytest.mark.slow
def test_job_from_notebooks_trains_the_kernels_preset_without_a_build(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    job = launch(one_step_config(tmp_path, "digest"), cluster, linger_s=5)
    assert job.wait(timeout_s=300) == "finished", job.logs()
    recorded = ModelDigest.from_dict(job.info()["model_digest"])
    assert recorded == local_model_digest("tiny-calculator")
    assert "building" not in job.logs() and "using the cache" not in job.logs()


@pytest.mark.slow
def test_another_model_fails_the_job_before_step_1(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    other = ModelDigest(weights="0" * 64, tokenizer=local_model_digest("tiny-calculator").tokenizer)
    monkeypatch.setattr(launcher, "local_model_digest", lambda name: other)
    job = launch(one_step_config(tmp_path, "mismatch"), cluster, linger_s=5)
    with pytest.raises(JobFailed, match="not the one the kernel loaded: its weights differ"):
        job.wait(timeout_s=300)
    assert job.metrics() == [] and job.info()["step"] == 0
