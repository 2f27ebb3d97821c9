"""rf.rewards.reward_model on a small randomly initialised classifier saved to a temporary folder: the
chat template applied to the conversation, batched scoring equal to one-by-one, use from a run config
and from the RewardLab, and the errors for folders that hold something else."""

import json

import pytest
import torch
from tiny_models import random_qwen3, save_with_tokenizer
from transformers import Qwen3Config, Qwen3ForSequenceClassification

from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.presets.tokenizer import VOCAB_SIZE, build_tokenizer
from rlfactory_nb.rewards import RewardLoadError, RewardRunner, make_sample, reward_model
from rlfactory_nb.rewards.reward_model import RewardModelError


def classifier(num_labels: int = 1) -> Qwen3ForSequenceClassification:
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_labels=num_labels,
        id2label={i: name for i, name in enumerate(["bad", "good"][:num_labels])} if num_labels > 1 else None,
    )
    return Qwen3ForSequenceClassification(config).eval()


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return save_with_tokenizer(classifier(), tmp_path_factory.mktemp("reward-model"))


def samples(n: int = 5):
    return [
        make_sample(
            "<tool_call>...</tool_call>",
            f"The answer is {'x' * i}{2 * i}.",
            ground_truth=str(2 * i),
            id=f"s{i}",
        )
        for i in range(n)
    ]


def by_hand(folder, sample) -> float:
    """The classifier's logit for the chat-template render of the whole conversation."""
    tokenizer = build_tokenizer()
    model = Qwen3ForSequenceClassification.from_pretrained(folder).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    text = tokenizer.apply_chat_template(sample.trajectory.messages, tokenize=False)
    assert text.count("<|im_start|>assistant") == 2  # the chat template, over every turn
    with torch.no_grad():
        return float(model(**tokenizer([text], return_tensors="pt")).logits[0, 0])


def test_scores_are_the_classifier_logit_of_the_templated_conversation(rm_dir):
    rm = reward_model(rm_dir, device="cpu", batch_size=2)
    batch = samples()
    scores = rm.score(batch)
    assert rm.forwards == 3  # 5 samples in batches of 2
    assert scores == pytest.approx([by_hand(rm_dir, sample) for sample in batch], abs=1e-4)
    assert len({round(s, 5) for s in scores}) > 1  # the conversations differ, so do the scores


async def test_concurrent_calls_are_batched_and_match_one_by_one(rm_dir):
    rm = reward_model(rm_dir, device="cpu", batch_size=4)
    batch = samples(6)
    runner = RewardRunner({"rm": rm})
    outcomes = await runner.score(batch)
    assert rm.forwards == 2  # 6 concurrent calls: a full batch of 4, then the other 2
    alone = reward_model(rm_dir, device="cpu", batch_size=1)
    assert [o.score for o in outcomes] == pytest.approx(alone.score(batch), abs=1e-4)
    assert all(o.ok for o in outcomes)


def test_from_a_run_config_with_arguments(rm_dir):
    cfg = RunConfig.from_dict(
        {
            "name": "rm",
            "reward": {
                "function": "rlfactory_nb.rewards:reward_model",
                "args": {"path": str(rm_dir), "device": "cpu", "batch_size": 8},
            },
        }
    )
    runner = RewardRunner.from_config(cfg.reward)
    outcomes = runner.score_sync(samples(3))
    assert [o.score for o in outcomes] == pytest.approx([by_hand(rm_dir, s) for s in samples(3)], abs=1e-4)
    assert RunConfig.from_dict(cfg.to_dict()).reward.args == cfg.reward.args  # survives the checkpoint copy
    bad = cfg.replace({"reward.args": {"path": str(rm_dir), "batch_sise": 8}})
    with pytest.raises(RewardLoadError, match="batch_sise"):
        RewardRunner.from_config(bad.reward)


async def test_usable_in_the_reward_lab(rm_dir):
    from rlfactory_nb.reward_lab import RewardLab

    rm = reward_model(rm_dir, device="cpu")
    lab = RewardLab(
        agent=None, dataset=[{"messages": [], "ground_truth": ""}], rewards={"rm": rm}, group_size=2
    )
    lab.groups = [[sample.trajectory for sample in _rolled_out(2)]]
    await lab.rescore()
    assert lab.scores("rm").shape == (1, 2) and lab.scores("rm").abs().sum() > 0
    assert rm.forwards == 1


def _rolled_out(n: int):
    """Samples backed by trajectories, as rollouts give them."""
    from rlfactory_nb.types import Sample, Trajectory, Turn

    out = []
    for i in range(n):
        messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": f"{i + 3}"}]
        traj = Trajectory([1], [2], [1], [-0.5], [Turn(text=f"{i + 3}")], messages, id=f"t{i}")
        out.append(Sample.from_trajectory(traj))
    return out


def test_several_labels_need_a_label_and_score_its_probability(tmp_path):
    folder = save_with_tokenizer(classifier(num_labels=2), tmp_path / "two")
    with pytest.raises(RewardModelError, match="2 labels.*pass label="):
        reward_model(folder, device="cpu")
    good = reward_model(folder, device="cpu", label="good").score(samples(2))
    bad = reward_model(folder, device="cpu", label=0).score(samples(2))
    assert [g + b for g, b in zip(good, bad)] == pytest.approx([1.0, 1.0])
    with pytest.raises(RewardModelError, match="no label 'great'"):
        reward_model(folder, device="cpu", label="great")


def test_a_language_model_folder_is_refused_naming_what_it_holds(tmp_path):
    folder = save_with_tokenizer(random_qwen3(), tmp_path / "lm")
    with pytest.raises(RewardModelError, match=rf"{folder} holds Qwen3ForCausalLM \(a language model"):
        reward_model(folder, device="cpu")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(RewardModelError, match=r"holds no config.json.*notes.txt"):
        reward_model(tmp_path / "empty", device="cpu")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(RewardModelError, match="names no architecture"):
        reward_model(tmp_path / "bare", device="cpu")
