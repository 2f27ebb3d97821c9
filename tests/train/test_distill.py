"""On-policy distillation in the training step (rlfactory_nb/train/distill.py): a real teacher engine
scores the student's ids, the advantages and a one-step run's loss checked against hand computations.
The Ray backend's teacher actor: tests/cluster/test_distill_engine.py."""

import pytest
import torch
from tiny_models import random_qwen3, tiny_run_config

from rlfactory_nb.engines.hf import HFEngine
from rlfactory_nb.errors import ConfigError, TokenizerMismatch
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.programs.assembly import SEGMENTS_KEY, expand_segments
from rlfactory_nb.train.distill import TEACHER_KEY, Distillation, same_tokenizer
from rlfactory_nb.train.loop import Trainer, train
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.train.run_folder import RunFolder
from rlfactory_nb.types import Trajectory


def forward_logprobs(model: torch.nn.Module, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 by a plain forward and log-softmax: the hand computation."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()  # (L-1, V)
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()


def two_turn_rows() -> list[Trajectory]:
    """A tool-using trajectory (assistant turn, tool result masked, assistant turn) and a one-turn one."""
    tool_row = Trajectory(
        prompt_ids=[5, 6, 7], response_ids=[10, 11, 12, 13, 14, 15, 16], loss_mask=[1, 1, 0, 0, 0, 1, 1],
        logprobs=[-1.0, -2.0, -0.5, -0.25],
    )
    plain_row = Trajectory(prompt_ids=[5, 8], response_ids=[20, 21], loss_mask=[1, 1], logprobs=[-3.0, -0.125])
    return [tool_row, plain_row]


def has_a_masked_stretch(traj: Trajectory) -> bool:
    """Tokens with mask 0 between sampled ones: a tool result (or user turn) inside the response."""
    mask = traj.loss_mask
    return 1 in mask and 0 in mask[mask.index(1) : len(mask) - mask[::-1].index(1)]


def distill_config(**distill) -> object:
    cfg = tiny_run_config("tiny-calculator", "runs", "rlfactory_nb.rewards.functions:exact_match")
    return cfg.replace({"distill": {"teacher": "teacher", **distill}, "grpo.filter_zero_variance": False})


@pytest.fixture(scope="module")
def teacher():
    model = random_qwen3(seed=7)
    return model, HFEngine(model, build_tokenizer(), num_threads=1)


async def test_the_advantage_is_minus_coef_times_the_kl_on_sampled_tokens_only(teacher):
    model, engine = teacher
    rows = two_turn_rows()
    distill = Distillation.from_config(distill_config(coef=0.5, only=True), engine, build_tokenizer())
    advantages, metrics = await distill.advantages(rows, torch.tensor([1.0, -1.0]))

    gaps = []
    for row, got in zip(rows, advantages):
        scored = forward_logprobs(model, row.prompt_ids + row.response_ids)[len(row.prompt_ids) - 1 :]
        teacher_sampled = [value for value, trained in zip(scored, row.loss_mask) if trained]
        assert row.metadata[TEACHER_KEY] == pytest.approx(teacher_sampled, abs=1e-4)
        student = iter(row.logprobs)
        expected = []
        for value, trained in zip(scored, row.loss_mask):
            gap = next(student) - value if trained else 0.0
            gaps += [gap] if trained else []
            expected.append(-0.5 * gap)  # only: the reward's advantage is left out
        assert got == pytest.approx(expected, abs=1e-4)
    assert advantages[0][2:5] == [0.0, 0.0, 0.0]  # the tool result's tokens
    assert metrics["distill/reverse_kl"] == pytest.approx(sum(gaps) / 6, abs=1e-4)
    assert metrics["distill/tokens"] == 6 and metrics["distill/teacher_s"] > 0


async def test_an_agent_programs_segments_are_each_scored_with_their_own_context(teacher):
    """An episode whose history was rewritten is two training rows (programs/assembly.py); each is
    scored as its own prompt + response, and both get the episode's reward advantage plus their KL."""
    model, engine = teacher
    earlier = {"prompt_ids": [5, 9], "response_ids": [30, 31, 32], "loss_mask": [1, 0, 1], "logprobs": [-2.0, -1.0],
               "reason": "rewritten history"}  # fmt: skip
    episode = two_turn_rows()[0]
    episode.metadata[SEGMENTS_KEY] = [earlier]
    rows, advantages = expand_segments([episode], torch.tensor([0.25]))
    distill = Distillation.from_config(distill_config(coef=1.0), engine, build_tokenizer())
    got, metrics = await distill.advantages(rows, advantages)
    assert [row.response_ids for row in rows] == [[30, 31, 32], episode.response_ids]
    for row, values in zip(rows, got):
        scored = forward_logprobs(model, row.prompt_ids + row.response_ids)[len(row.prompt_ids) - 1 :]
        student = iter(row.logprobs)
        expected = [0.25 - (next(student) - value) if trained else 0.25 for value, trained in zip(scored, row.loss_mask)]
        assert values == pytest.approx(expected, abs=1e-4)
    assert metrics["distill/tokens"] == 2 + 4


async def test_the_kl_term_adds_to_the_rewards_advantage_per_trajectory_or_per_token(teacher):
    _, engine = teacher
    distill = Distillation.from_config(distill_config(coef=2.0), engine, build_tokenizer())
    alone, _ = await Distillation.from_config(distill_config(coef=2.0, only=True), engine, build_tokenizer()).advantages(
        two_turn_rows(), torch.zeros(2)
    )
    per_row, _ = await distill.advantages(two_turn_rows(), torch.tensor([1.0, -1.0]))
    per_token = [[0.5] * 7, [0.25, 0.75]]
    by_token, _ = await distill.advantages(two_turn_rows(), per_token)
    for index, base in enumerate([1.0, -1.0]):
        assert per_row[index] == pytest.approx([a + base for a in alone[index]], abs=1e-5)
        assert by_token[index] == pytest.approx([a + b for a, b in zip(alone[index], per_token[index])], abs=1e-5)


def test_a_teacher_with_another_tokenizer_is_refused_naming_both():
    student, other = build_tokenizer(), build_tokenizer()
    other.add_tokens(["<only-the-teacher-has-this>"])
    with pytest.raises(TokenizerMismatch) as refused:
        same_tokenizer(student, other, "my-teacher")
    message = str(refused.value)
    assert "my-teacher" in message and "<only-the-teacher-has-this>" in message
    assert message.count(type(student).__name__) == 2 and "student's" in message and "teacher's" in message
    assert isinstance(refused.value, ConfigError)
    same_tokenizer(student, build_tokenizer(), "same")  # the same vocabulary passes


def test_distillation_alone_needs_the_zero_variance_filter_off(teacher):
    cfg = distill_config(only=True).replace({"grpo.filter_zero_variance": True})
    with pytest.raises(ConfigError, match="set grpo.filter_zero_variance: false"):
        Distillation.from_config(cfg, teacher[1], build_tokenizer())
    assert Distillation.from_config(cfg.replace({"distill": None}), None, build_tokenizer()) is None


COEF = 0.5


def one_step_config(output_dir, **overrides):
    """One step of distillation alone: student tiny-calculator, teacher tiny-guess (the same tokenizer,
    another warm start), the calculator tools on (tool results sit between sampled turns), the dapo
    token-mean loss over one micro-batch, every group and trajectory trained."""
    return tiny_run_config(
        "tiny-calculator", output_dir, "rlfactory_nb.rewards.functions:exact_match", name="distilled",
        tools__config="examples/calculator/tools.yaml", rollout__max_turns=2, rollout__max_new_tokens=48,
        rollout__max_total_tokens=512, grpo__steps=1, grpo__prompts_per_step=2, grpo__group_size=2,
        grpo__mini_batch_size=4, grpo__micro_batch_size=4, grpo__loss="dapo", grpo__filter_zero_variance=False,
        grpo__mask_truncated=False, **{"distill": {"teacher": "tiny-guess", "coef": COEF, "only": True}, **overrides},
    )  # fmt: skip


async def test_a_local_one_step_run_trains_on_the_teachers_kl_as_computed_by_hand(tmp_path):
    """The run's metrics hold the KL, and its loss is the mean of -advantage over exactly the sampled tokens."""
    cfg = one_step_config(tmp_path / "runs", cluster__backend="local")
    await train(cfg)
    (row,) = read_metrics(cfg.run_dir)
    check_against_hand_computation(row, RunFolder(cfg.run_dir).load_trajectories(1), COEF)


def check_against_hand_computation(row: dict, trajectories: list[Trajectory], coef: float) -> None:
    """The step's KL from an independent forward of the teacher, and its loss: with the advantage
    -coef * kl and a ratio of 1 (one on-policy step), the token-mean loss is coef * mean(kl)."""
    teacher = Policy.load("tiny-guess").model
    assert any(has_a_masked_stretch(traj) for traj in trajectories)  # a tool result between two turns
    gaps = []
    for traj in trajectories:
        scored = forward_logprobs(teacher, traj.prompt_ids + traj.response_ids)[len(traj.prompt_ids) - 1 :]
        sampled = [value for value, trained in zip(scored, traj.loss_mask) if trained]
        assert traj.metadata[TEACHER_KEY] == pytest.approx(sampled, abs=1e-4)
        gaps += [student - teacher_logprob for student, teacher_logprob in zip(traj.logprobs, sampled)]
    assert row["train/tokens"] == len(gaps) == row["distill/tokens"]
    assert row["distill/reverse_kl"] == pytest.approx(sum(gaps) / len(gaps), abs=1e-4)
    assert row["train/loss"] == pytest.approx(coef * row["distill/reverse_kl"], abs=2e-3)
    assert row["distill/teacher_s"] > 0


async def test_a_running_engine_as_teacher_needs_the_ray_backend(tmp_path):
    cfg = one_step_config(tmp_path / "runs", cluster__backend="local", distill={"teacher": "engine:big-teacher"})
    trainer = Trainer(cfg)
    try:
        with pytest.raises(ConfigError, match="cluster.backend: ray"):
            await trainer.start()
    finally:
        await trainer.close()
