"""The tiny-calculator-weak preset (bench/distill.py's student): tiny-calculator's own warm-start
stopped at `presets.WEAK_STEPS`, on the full build's schedule; shipped, loaded without a build, and
(slow) rebuilt from the recipe into a student as weak."""

import json

import pytest
import torch
from transformers import Qwen3ForCausalLM

from rlfactory_nb.models import presets
from rlfactory_nb.models.presets import warmstart
from rlfactory_nb.models.presets.shipped import Manifest, file_digests, shipped_folder
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.reasoning_mode import trained_mode


def test_stop_at_ends_the_warm_start_early_on_the_full_builds_schedule(monkeypatch):
    """The learning rate still decays over cfg.max_steps: the result is the full build at that step."""
    seen = []
    schedule = warmstart._schedule
    monkeypatch.setattr(
        warmstart, "_schedule", lambda step, cfg: seen.append((step, cfg.max_steps)) or schedule(step, cfg)
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(presets.tiny_config())
    cfg = warmstart.WarmStartConfig(batch_size=2)
    metrics = warmstart.warm_start(model, build_tokenizer(), cfg, log=lambda _: None, stop_at=2)
    assert metrics["step"] == 2 and seen == [(0, cfg.max_steps), (1, cfg.max_steps)]


def test_the_weak_preset_hash_follows_the_calculator_recipe_and_its_stop(monkeypatch):
    before = presets.preset_hash(presets.WEAK)
    assert before not in (presets.recipe_hash(), presets.preset_hash("tiny-guess"))
    monkeypatch.setattr(presets, "WEAK_STEPS", presets.WEAK_STEPS + 50)
    assert presets.preset_hash(presets.WEAK) != before
    monkeypatch.undo()
    monkeypatch.setattr(presets, "recipe_hash", lambda *args: "0123456789ab")
    assert presets.preset_hash(presets.WEAK) != before


def test_a_missing_weak_preset_is_built_as_the_calculator_stopped_early(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(
        presets,
        "build_tiny_calculator",
        lambda path, log=print, stop_at=None: calls.append((path, stop_at)) or path,
    )
    path = presets.cached_preset(presets.WEAK, log=lambda _: None)
    assert (
        calls == [(tmp_path / f"{presets.WEAK}-{presets.preset_hash(presets.WEAK)}", presets.WEAK_STEPS)]
        and path == calls[0][0]
    )


def test_the_shipped_weak_preset_loads_without_a_build(tmp_path, monkeypatch):
    from rlfactory_nb.models.policy import Policy

    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    monkeypatch.setattr(
        presets, "build_tiny_calculator", lambda *a, **k: pytest.fail("built the shipped preset")
    )
    policy = Policy.load(presets.WEAK, device="cpu", log=lambda _: None)
    assert policy.path == shipped_folder(presets.WEAK) and list(tmp_path.iterdir()) == []
    assert trained_mode(presets.WEAK) is False  # prompted as its warm-start trained it, non-thinking
    weak = policy.model.state_dict()
    full = Policy.load("tiny-calculator", device="cpu", log=lambda _: None).model.state_dict()
    assert weak.keys() == full.keys() and any(not torch.equal(weak[k], full[k]) for k in weak)


@pytest.mark.slow
def test_a_rebuild_is_the_calculator_stopped_early_and_still_weak(tmp_path, monkeypatch):
    """About 550 warm-start steps (3-6 min). Not bit for bit: the shipped weights are one build's, and
    the warm-start is chaotic at step 550 (one thread here: copy 0.479 / 0.208; two threads: 1.0 /
    0.354; CI's machine: another digest), so a rebuild is checked for what the bench needs of it: a
    student that copies results far worse than the full preset (0.979)."""
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built = presets.cached_preset(presets.WEAK, log=lambda _: None)
    finally:
        torch.set_num_threads(threads)
    weak = json.loads((built / "warm_start.json").read_text())
    full = json.loads((shipped_folder("tiny-calculator") / "warm_start.json").read_text())
    assert weak["step"] == presets.WEAK_STEPS and full["step"] > presets.WEAK_STEPS
    assert weak["result_copy"] <= full["result_copy"] - 0.4 and weak["loss"] >= 2 * full["loss"]
    assert set(file_digests(built)) == set(Manifest.read(shipped_folder(presets.WEAK)).files)
