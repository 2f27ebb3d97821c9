import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from rlfactory_nb.train.batch import (
    TrainBatch,
    build_batch,
    first_trained_position,
    micro_batches,
    shift_right,
    token_logprobs,
    window_logprobs,
)
from rlfactory_nb.types import Trajectory

from .conftest import tiny_random_qwen3

PAD = 0


def two_trajectories() -> list[Trajectory]:
    # t0: a sampled turn (7, 8), two tool tokens (9, 10), a sampled token (11)
    # t1: a shorter prompt and a single sampled turn (12, 13)
    return [
        Trajectory(
            prompt_ids=[5, 6],
            response_ids=[7, 8, 9, 10, 11],
            loss_mask=[1, 1, 0, 0, 1],
            logprobs=[-0.1, -0.2, -0.3],
        ),
        Trajectory(prompt_ids=[5], response_ids=[12, 13], loss_mask=[1, 1], logprobs=[-0.4, -0.5]),
    ]


def test_tokens_masks_and_logprobs_line_up_at_the_sampled_positions():
    batch = build_batch(two_trajectories(), [1.0, -1.0], pad_id=PAD)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11], [5, 12, 13, PAD, PAD, PAD, PAD]]
    assert batch.attention_mask.tolist() == [[1] * 7, [1, 1, 1, 0, 0, 0, 0]]
    assert batch.loss_mask.int().tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 1, 1, 0, 0, 0, 0]]
    # the mask selects exactly the sampled tokens, and each logprob sits on its own token
    assert batch.input_ids[batch.loss_mask].tolist() == [7, 8, 11, 12, 13]
    torch.testing.assert_close(
        batch.old_logprobs[batch.loss_mask], torch.tensor([-0.1, -0.2, -0.3, -0.4, -0.5])
    )
    expected = [[0, 0, -0.1, -0.2, 0, 0, -0.3], [0, -0.4, -0.5, 0, 0, 0, 0]]
    torch.testing.assert_close(batch.old_logprobs, torch.tensor(expected))
    assert batch.advantages.tolist() == [1.0, -1.0]
    assert batch.num_sampled_tokens == 5 and batch.batch_size == 2


def test_per_token_advantages_are_placed_on_the_response_positions():
    batch = build_batch(two_trajectories(), [[1, 2, 3, 4, 5], [6, 7]], pad_id=PAD)
    assert batch.advantages.tolist() == [[0, 0, 1, 2, 3, 4, 5], [0, 6, 7, 0, 0, 0, 0]]
    padded = torch.tensor([[1.0, 2, 3, 4, 5], [6, 7, 0, 0, 0]])  # (B, R) padded to the longest response
    assert torch.equal(build_batch(two_trajectories(), padded, pad_id=PAD).advantages, batch.advantages)


def test_inconsistent_trajectories_fail_with_the_field_named():
    bad = Trajectory(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1, 1], logprobs=[-0.1])
    with pytest.raises(ValueError, match="trajectory 1: 1 logprobs for 2 sampled tokens"):
        build_batch([two_trajectories()[0], bad], [0.0, 0.0], pad_id=PAD)
    short_mask = Trajectory(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1], logprobs=[-0.1])
    with pytest.raises(ValueError, match="loss_mask has 1 entries but response_ids has 2"):
        build_batch([short_mask], [0.0], pad_id=PAD)
    with pytest.raises(ValueError, match="3 advantages for 2 trajectories"):
        build_batch(two_trajectories(), [0.0, 0.0, 0.0], pad_id=PAD)


def test_train_batch_checks_shapes():
    ones = torch.ones(2, 3)
    with pytest.raises(ValueError, match="loss_mask has shape"):
        TrainBatch(ones.long(), ones.long(), torch.ones(2, 4, dtype=torch.bool), ones, torch.zeros(2))
    with pytest.raises(ValueError, match="advantages has shape"):
        TrainBatch(ones.long(), ones.long(), ones.bool(), ones, torch.zeros(3))


def test_micro_batches_slice_rows_and_drop_all_padding_columns():
    trajectories = two_trajectories() + [
        Trajectory(prompt_ids=[5], response_ids=[14], loss_mask=[1], logprobs=[-0.6])
    ]
    batch = build_batch(trajectories, [[1, 2, 3, 4, 5], [6, 7], [8]], pad_id=PAD)
    first, second = micro_batches(batch, 2)
    assert first.input_ids.shape == (2, 7) and torch.equal(first.loss_mask, batch.loss_mask[:2])
    # the last row is 2 tokens long: its micro-batch is cut to 2 columns, advantages too
    assert second.input_ids.tolist() == [[5, 14]]
    assert second.advantages.tolist() == [[0, 8]]
    assert second.old_logprobs[0].tolist() == pytest.approx([0, -0.6])
    assert [len(m.input_ids) for m in micro_batches(batch, 1)] == [1, 1, 1]
    with pytest.raises(ValueError, match=">= 1"):
        next(micro_batches(batch, 0))


def test_shift_right_puts_the_predicting_output_on_the_predicted_token():
    outputs = torch.tensor([[[1.0], [2.0], [3.0]]])  # (B=1, L=3, 1)
    assert shift_right(outputs).tolist() == [[[0.0], [1.0], [2.0]]]


def test_token_logprobs_equal_a_manual_log_softmax_gather_on_a_tiny_model():
    torch.manual_seed(0)
    model = tiny_model()
    batch = build_batch(two_trajectories(), [0.0, 0.0], pad_id=PAD)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, L, V)
    got = token_logprobs(logits, batch.input_ids)
    for b in range(2):
        assert got[b, 0] == 0.0
        for i in range(1, batch.input_ids.shape[1]):
            manual = torch.log_softmax(logits[b, i - 1].float(), dim=-1)[batch.input_ids[b, i]]
            assert got[b, i].item() == pytest.approx(manual.item(), abs=1e-5)


def test_logprobs_recorded_while_sampling_reappear_at_the_masked_positions():
    # Play the rollout engine: score each trajectory alone, unpadded, keeping only sampled tokens' logprobs.
    # After padding and batching, the trainer's logprobs at loss_mask must equal those recorded ones.
    torch.manual_seed(1)
    model = tiny_model()
    trajectories = []
    for traj in two_trajectories():
        ids = torch.tensor([traj.prompt_ids + traj.response_ids])
        with torch.no_grad():
            all_logprobs = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)  # (L, V)
        start = len(traj.prompt_ids)
        sampled = [
            all_logprobs[start + j - 1, token].item()
            for j, (token, m) in enumerate(zip(traj.response_ids, traj.loss_mask))
            if m
        ]
        trajectories.append(Trajectory(traj.prompt_ids, traj.response_ids, traj.loss_mask, sampled))
    batch = build_batch(trajectories, [0.0, 0.0], pad_id=PAD)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    trainer = token_logprobs(logits, batch.input_ids)
    torch.testing.assert_close(
        trainer[batch.loss_mask], batch.old_logprobs[batch.loss_mask], rtol=0, atol=1e-5
    )


def tiny_model() -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
    )
    return Qwen3ForCausalLM(config).eval()


def test_logprobs_from_the_response_window_equal_the_full_forward_pass():
    model = tiny_random_qwen3()
    ids = torch.randint(0, 300, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(3, 12, dtype=torch.bool)
    mask[0, 7:], mask[1, 5:9], mask[2, 10:] = True, True, True
    start = first_trained_position(mask)
    assert start == 5
    with torch.no_grad():
        full = token_logprobs(model(input_ids=ids).logits, ids)
        window = model(input_ids=ids, logits_to_keep=12 - start + 1).logits
    assert window.shape[1] == 8, "the forward kept only the response window's logits"
    windowed = window_logprobs(window, ids, start)
    assert torch.allclose(windowed[:, start:], full[:, start:], atol=1e-6)
    assert not windowed[:, :start].any()
