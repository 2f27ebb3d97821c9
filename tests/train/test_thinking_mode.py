"""`rollout.enable_thinking` reaches every agent a run builds: one GRPO step in each mode on a
Qwen3-template tokenizer trains on the prompt ids that mode renders; unset, the model's own default."""

import json
from pathlib import Path

import pytest
import torch
from tiny_models import random_qwen3, save_with_tokenizer, tiny_run_config

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.reasoning_mode import thinking_mode
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.tokens import thinks_by_default

REWARD = Path(__file__).resolve().parent / "scripted_rewards.py"
EMPTY_THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_with_tokenizer(random_qwen3(), tmp_path_factory.mktemp("model"))


def trained_prompts(model_dir: Path, out: Path, enable_thinking: bool | None) -> list[list[int]]:
    cfg = tiny_run_config(model_dir, out, f"{REWARD}:first_token", grpo__steps=1,
                          grpo__trajectories_per_step=-1, rollout__enable_thinking=enable_thinking)
    result = rf.train_sync(cfg)
    assert result.step == 1 and torch.isfinite(torch.tensor(result.metrics["train/loss"]))
    files = sorted(result.run_dir.rglob("trajectories/*.jsonl"))
    return [json.loads(line)["prompt_ids"] for file in files for line in file.read_text().splitlines()]


def test_one_step_in_each_mode_trains_on_that_modes_prompt(model_dir, tmp_path):
    tokenizer = build_tokenizer()
    prompts = {mode: trained_prompts(model_dir, tmp_path / str(mode), mode) for mode in (True, False)}
    for mode, ids in prompts.items():
        assert ids, "the step saved its trajectories"
        for prompt in ids:
            text = tokenizer.decode(prompt)
            assert text.endswith(EMPTY_THINK) is (not mode), text[-60:]
            messages = _messages_of(text)
            rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                     enable_thinking=mode)
            assert prompt == tokenizer.encode(rendered, add_special_tokens=False)
    think_block = tokenizer.encode("<think>\n\n</think>\n\n", add_special_tokens=False)
    assert prompts[False][0] == prompts[True][0] + think_block  # the same rows, the same order
    assert thinking_mode(tiny_run_config(model_dir, tmp_path, "x.py:f")) is None  # unset: the template's default


def _messages_of(text: str) -> list[dict]:
    """The system and user messages of a rendered Qwen3 prompt (enough to render it again)."""
    blocks = text.split("<|im_start|>")[1:-1]
    return [{"role": b.split("\n", 1)[0], "content": b.split("\n", 1)[1].removesuffix("<|im_end|>\n")} for b in blocks]


def test_unset_is_the_models_own_default_and_reaches_the_agent(model_dir):
    tokenizer = build_tokenizer()
    assert thinks_by_default(tokenizer)  # Qwen3's template thinks unless told not to
    preset = RunConfig.from_dict({"name": "t"})
    assert preset.model.name == "tiny-calculator" and thinking_mode(preset) is False  # trained non-thinking
    chosen = RunConfig.from_dict({"name": "t", "rollout": {"enable_thinking": True}})
    assert thinking_mode(chosen) is True
    engine = ScriptedEngine(tokenizer, ["hi"])
    folder = RunConfig.from_dict({"name": "t", "model": {"name": str(model_dir)}})
    built = {name: Agent.from_config(cfg, None, engine=engine, trained_thinking=thinking_mode(cfg)) for name, cfg in
             [("preset", preset), ("chosen", chosen), ("folder", folder)]}
    assert {name: agent.enable_thinking for name, agent in built.items()} == {"preset": False, "chosen": True, "folder": True}
    assert not built["folder"].starts_in_reasoning  # Qwen3 opens <think> itself; Qwen3.5 pre-fills it


def test_a_model_folder_keeps_the_mode_it_was_trained_in(model_dir, tmp_path):
    """A checkpoint (or a warm-start's output) records its run's mode: a run naming that folder with
    `enable_thinking` unset prompts it as it was trained, not by the template's default."""
    from rlfactory_nb.models.checkpoint import save_checkpoint
    from rlfactory_nb.reasoning_mode import trained_mode

    tokenizer = build_tokenizer()
    model = random_qwen3()
    preset_run = RunConfig.from_dict({"name": "t"})  # the tiny preset: non-thinking
    folder = save_checkpoint(tmp_path / "run", 1, model, tokenizer, {}, preset_run).path
    assert trained_mode(str(folder)) is False and trained_mode(str(model_dir)) is None
    follow_up = RunConfig.from_dict({"name": "t", "model": {"name": str(folder)}})
    assert thinking_mode(follow_up) is False
    agent = Agent.from_config(follow_up, None, engine=ScriptedEngine(tokenizer, ["hi"]), trained_thinking=thinking_mode(follow_up))
    assert agent.enable_thinking is False
    thinking_run = RunConfig.from_dict({"name": "t", "model": {"name": str(folder)}, "rollout": {"enable_thinking": True}})
    again = save_checkpoint(tmp_path / "run2", 1, model, tokenizer, {}, thinking_run).path
    assert trained_mode(str(again)) is True  # the run's own setting wins over the model's record
    (again / "reasoning_mode.json").write_text("not json")
    assert trained_mode(str(again)) is None  # a damaged record is the template's default, not a crash
