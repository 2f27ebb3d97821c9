"""rf.compare_policies: two policies' log-probs of the same fixed trajectories, token by token.

The hand-built pair raises one token's logit by exactly DELTA at every scored position (a row added
to an untied output layer, solved so that h . row = DELTA for each position's hidden state), so the
expected changes are known in closed form: that token gains DELTA - log(1 - p + p e^DELTA), every
other token loses log(1 - p + p e^DELTA).
"""

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from tiny_models import random_qwen3, save_with_tokenizer

import rlfactory_nb as rf
from rlfactory_nb.compare import compare_policies
from rlfactory_nb.errors import CheckpointError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.types import Trajectory, Turn

DELTA = 1.5


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def trajectories(tokenizer):
    """Two short trajectories (prompt, a sampled turn, a tool turn, a sampled turn): 62 positions."""

    def make(name, prompt, first, tool, second):
        ids = [tokenizer.encode(text) for text in (prompt, first, tool, second)]
        response = ids[1] + ids[2] + ids[3]
        mask = [1] * len(ids[1]) + [0] * len(ids[2]) + [1] * len(ids[3])
        turns = [Turn(first, len(ids[1])), Turn(second, len(ids[3]))]
        return Trajectory(ids[0], response, mask, [0.0] * sum(mask), turns, id=name)

    return [
        make("a", "What is 2+3?", "I call the tool", " result: 5", "The answer is 5"),
        make("b", "Compute 7*6 please", "call it now", " result: 42", "answer 42 it is"),
    ]


@pytest.fixture(scope="module")
def before(tokenizer):
    model = random_qwen3(0, hidden=64, head_dim=32)
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())  # untied
    model.config.tie_word_embeddings = False
    return Policy(model=model, tokenizer=tokenizer, path=Path("before"), name="before")


@pytest.fixture(scope="module")
def raised(before, trajectories, tokenizer):
    """`before` with the logit of one sampled token (" tool"'s first id) raised by DELTA everywhere."""
    target = trajectories[0].response_ids[3]
    with torch.no_grad():
        hidden = torch.cat([
            before.model.model(input_ids=torch.tensor([t.prompt_ids + t.response_ids])).last_hidden_state[0, :-1]
            for t in trajectories
        ])  # (positions, 64): at most 64 positions, so h . row = DELTA has an exact solution
        assert hidden.shape[0] <= hidden.shape[1]
        row = torch.linalg.lstsq(hidden, torch.full((hidden.shape[0], 1), DELTA)).solution[:, 0]
        model = copy.deepcopy(before.model)
        model.lm_head.weight[target] += row
    return Policy(model=model, tokenizer=tokenizer, path=Path("after"), name="after"), target


def direct_logprobs(model, traj):
    """Teacher-forced log p of each sampled token, from one plain forward pass (full logits)."""
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    start = len(traj.prompt_ids)
    return [
        logp[start + i - 1, token].item()
        for i, (token, mask) in enumerate(zip(traj.response_ids, traj.loss_mask))
        if mask
    ]


async def test_identical_policies_give_zero_difference_everywhere(before, trajectories):
    comparison = await compare_policies(trajectories, before, before)
    assert len(comparison.tokens) == sum(t.num_sampled_tokens for t in trajectories)
    assert (comparison.tokens["change"] == 0).all()
    assert (comparison.turns["change"] == 0).all() and (comparison.turns["kl"] == 0).all()
    assert comparison.turns[["trajectory", "turn"]].values.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert comparison.top_tokens().empty


async def test_values_equal_a_direct_forward_pass(before, raised, trajectories):
    after, _ = raised
    comparison = await compare_policies(trajectories, before, after)
    for index, traj in enumerate(trajectories):
        rows = comparison.trajectory_tokens(index)
        assert rows["token_id"].tolist() == [t for t, m in zip(traj.response_ids, traj.loss_mask) if m]
        for column, policy in (("logprob_before", before), ("logprob_after", after)):
            torch.testing.assert_close(
                torch.tensor(rows[column].tolist()), torch.tensor(direct_logprobs(policy.model, traj)),
                atol=1e-5, rtol=0,
            )
        torch.testing.assert_close(
            torch.tensor(rows["change"].tolist()), torch.tensor((rows["logprob_after"] - rows["logprob_before"]).tolist())
        )


async def test_a_raised_logit_moves_exactly_that_token(before, raised, trajectories, tokenizer):
    after, target = raised
    comparison = await compare_policies(trajectories, before, after)
    tokens = comparison.tokens
    shift = (tokens["logprob_before"].map(math.exp) * math.expm1(DELTA)).map(math.log1p)  # log(1 - p + p e^D) for target
    hit = tokens["token_id"] == target
    assert hit.sum() >= 1
    torch.testing.assert_close(
        torch.tensor(tokens.loc[hit, "change"].tolist()), torch.tensor((DELTA - shift[hit]).tolist()), atol=1e-4, rtol=0
    )
    assert (tokens.loc[hit, "change"] > 1.0).all() and (tokens.loc[~hit, "change"] < 0).all()
    top = comparison.top_tokens(5)
    more = top[top["direction"] == "more"]
    assert more["token"].tolist() == [tokenizer.decode([target])]
    assert len(top[top["direction"] == "less"]) == 5
    assert comparison.summary["trajectory"].tolist()[0] == 0  # the one holding the raised token leads
    assert (comparison.turns["kl"] >= 0).all() and comparison.turns["kl"].sum() > 0


def test_the_sync_twin_takes_engines_and_is_public(before, trajectories):
    engine = before.engine("hf")
    comparison = rf.compare_policies_sync(trajectories[:1], engine, before)
    assert comparison.before == "HFEngine" and (comparison.tokens["change"].abs() < 1e-6).all()
    assert "compare_policies" in rf.__all__


class NeverScores:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def score(self, token_ids):
        raise AssertionError("scored before the tokenizers were checked")


async def test_different_tokenizers_fail_before_any_scoring(before, trajectories):
    other = build_tokenizer()
    other.add_tokens(["<extra-token>"])
    with pytest.raises(ValueError, match="different tokenizers.*'<extra-token>'.*not comparable"):
        await compare_policies(trajectories, NeverScores(before.tokenizer), NeverScores(other))


async def test_a_trajectory_longer_than_the_context_fails_naming_it(before, trajectories):
    long = Trajectory(trajectories[0].prompt_ids, [5] * 600, [1] * 600, [0.0] * 600, id="too-long")
    with pytest.raises(ValueError, match=r"trajectory 1 \(too-long\), scored by 'before': .*exceed the model's context of 512"):
        await compare_policies([trajectories[0], long], before, before)


async def test_checkpoint_folders_load_and_a_lora_on_the_wrong_base_fails(tmp_path, trajectories):
    from peft import LoraConfig, get_peft_model

    small = save_with_tokenizer(random_qwen3(0, hidden=32), tmp_path / "small")
    big = save_with_tokenizer(random_qwen3(0, hidden=64, head_dim=32), tmp_path / "big")
    comparison = await compare_policies(trajectories, small, str(small), device="cpu")
    assert (comparison.tokens["change"] == 0).all()
    get_peft_model(random_qwen3(0, hidden=32), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "lora")
    config = json.loads((tmp_path / "lora/adapter_config.json").read_text())
    (tmp_path / "lora/adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(big)}))
    with pytest.raises(CheckpointError, match="does not fit the base model"):
        await compare_policies(trajectories, small, tmp_path / "lora", device="cpu")


def test_bad_arguments_say_what_is_taken(before, trajectories):
    with pytest.raises(TypeError, match="takes a Policy, a checkpoint folder, a preset name or an engine"):
        rf.compare_policies_sync(trajectories, before, 3)
    with pytest.raises(ValueError, match="at least one trajectory"):
        rf.compare_policies_sync([], before, before)


def test_the_cli_writes_the_tables_and_the_page(tmp_path, trajectories, capsys):
    from rlfactory_nb.cli import main
    from rlfactory_nb.types import save_jsonl

    run = tmp_path / "run"
    base = save_with_tokenizer(random_qwen3(0, hidden=32), tmp_path / "base")
    save_with_tokenizer(random_qwen3(1, hidden=32), run / "checkpoints" / "step_000002")
    (run / "checkpoints" / "step_000002" / "trainer_state.pt").write_bytes(b"")
    (run / "job.json").write_text(json.dumps({"model": str(base)}))
    save_jsonl(trajectories, run / "trajectories" / "step_000001.jsonl")
    assert main(["compare", str(run), "--steps", "0", "2", "--device", "cpu"]) == 0
    out = run / "compare" / "step_0-step_2"
    tokens = (out / "tokens.csv").read_text().splitlines()
    assert tokens[0] == "trajectory,turn,position,token_id,token,logprob_before,logprob_after,change"
    assert len(tokens) == 1 + sum(t.num_sampled_tokens for t in trajectories)
    assert "rf-change" in (out / "compare.html").read_text() and (out / "top_tokens.csv").exists()
    assert "wrote" in capsys.readouterr().out
    assert main(["compare", str(run), "--steps", "0", "5"]) == 2  # a mistake: one line, exit code 2
    assert "no checkpoint of step 5; it has steps [2]" in capsys.readouterr().err
