"""Padding-free micro-batches equal the padded path: log-probs, every registered loss and its
gradients, one optimizer step; packed sequences never see each other; bad input fails clearly."""

from dataclasses import replace

import pytest
import torch
from tiny_models import random_qwen3
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rlfactory_nb.algo.registry import LossArgs, loss_names
from rlfactory_nb.config_sections import LoraConfig
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.models.packed_attention import PACKED_SDPA
from rlfactory_nb.models.precision import Precision
from rlfactory_nb.models.presets.tokenizer import VOCAB_SIZE
from rlfactory_nb.train import update
from rlfactory_nb.train.batch import TrainBatch, build_batch
from rlfactory_nb.train.packing import PackedRow, check_attention, first_fit_decreasing, pack
from rlfactory_nb.train.trainable import TrainingSetup
from rlfactory_nb.train.update import UpdateSettings, forward_stats, micro_loss, policy_update, token_stats
from rlfactory_nb.types import Trajectory

from .test_loop import run_one_step

LENGTHS = [5, 12, 40, 77, 150, 300, 520, 900]
"""prompt + response tokens of the ragged batch"""
PADDED = UpdateSettings(loss_args=LossArgs(token_budget=1024), max_grad_norm=1e9, padding_free=False)
PACKED = replace(PADDED, padding_free=True)


def model(seed: int = 0, attention: str = PACKED_SDPA) -> torch.nn.Module:
    """A random tiny Qwen3, by default with the attention a padding-free run gives an sdpa model."""
    policy = random_qwen3(seed, max_positions=1024)
    policy.set_attn_implementation(attention)
    return policy


def trajectory(total: int, generator: torch.Generator, sampled: bool = True) -> Trajectory:
    """A prompt of ~1/5 of the tokens; a longer response has a tool result (mask 0) in its middle."""
    prompt = min(total - 1, 3 + total // 5)
    ids = torch.randint(0, VOCAB_SIZE, (total,), generator=generator).tolist()
    response = total - prompt
    mask = [1] * response
    if response >= 6:  # two assistant turns around a tool's output
        mask[response // 3 : 2 * response // 3] = [0] * (2 * response // 3 - response // 3)
    if not sampled:
        mask = [0] * response
    return Trajectory(ids[:prompt], ids[prompt:], mask, [-1.0] * sum(mask))


def ragged_batch(policy: torch.nn.Module, lengths=LENGTHS, empty: tuple[int, ...] = ()) -> TrainBatch:
    """Trajectories of `lengths` (those at the indices in `empty` with nothing sampled), mixed-sign
    advantages, and old log-probs near the policy's own so the clipped surrogate has gradients."""
    generator = torch.Generator().manual_seed(len(lengths))
    trajectories = [trajectory(total, generator, index not in empty) for index, total in enumerate(lengths)]
    advantages = torch.linspace(-1.0, 1.0, len(lengths)).roll(3)
    batch = build_batch(trajectories, advantages, pad_id=0)
    with torch.no_grad():
        own, _ = token_stats(policy, batch, PADDED, entropy_grad=False)
    noise = 0.05 * torch.randn(own.shape, generator=generator)
    return replace(batch, old_logprobs=(own + noise).masked_fill(~batch.loss_mask, 0.0))


def gradients(policy, batch, settings, reference=None):
    policy.zero_grad()
    loss, _, logprobs = micro_loss(policy, batch, None, settings, reference)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    return loss.detach(), grads, logprobs


# ---------------------------------------------------------------- the packing itself


def test_first_fit_decreasing_places_every_item_once_within_the_budget():
    lengths = torch.randint(1, 300, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    bins = first_fit_decreasing(lengths, 1000)
    assert sorted(index for members in bins for index in members) == list(range(200))
    assert all(sum(lengths[i] for i in members) <= 1000 for members in bins)
    assert len(bins) <= -(-sum(lengths) // 1000) + 1  # FFD is near-optimal on small items


def test_an_item_over_the_budget_is_a_bin_of_its_own():
    assert first_fit_decreasing([50, 3, 400, 2], 10) == [[2], [0], [1, 3]]
    with pytest.raises(ValueError, match="budget"):
        first_fit_decreasing([1], 0)


def test_pack_restarts_positions_and_unpack_puts_values_back():
    ids = torch.tensor([[4, 5, 6, 0], [7, 8, 0, 0], [9, 1, 2, 3]])
    attention = (torch.arange(4) < torch.tensor([[3], [2], [4]])).long()
    row = pack(ids, attention, attention.bool())
    assert row.input_ids.tolist() == [[4, 5, 6, 7, 8, 9, 1, 2, 3]]
    assert row.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert torch.equal(row.unpack(row.input_ids.float()), (ids * attention).float())


# ---------------------------------------------------------------- equal to the padded path


@pytest.mark.parametrize("attention", [PACKED_SDPA, "sdpa"])
def test_packed_log_probs_and_entropy_equal_the_padded_ones(attention):
    """Per-sequence sdpa (what a run uses) and stock sdpa's block-diagonal mask alike."""
    policy = model(attention=attention)
    batch = ragged_batch(policy)
    padded = token_stats(policy, batch, PADDED, entropy_grad=False)
    packed = token_stats(policy, batch, PACKED, entropy_grad=False)
    mask = batch.loss_mask
    assert mask.sum() > 1000 and packed[0][mask].abs().min() > 0  # real values over many tokens
    for a, b in zip(packed, padded):
        assert torch.allclose(a[mask], b[mask], atol=2e-5), (a[mask] - b[mask]).abs().max()


@pytest.mark.parametrize("loss", loss_names())
def test_every_loss_and_its_gradients_equal_the_padded_ones(loss):
    policy, reference = model(), model(seed=1)
    batch = ragged_batch(policy, empty=(2,))
    settings = replace(PADDED, loss=loss, kl_coef=0.1, entropy_coef=0.01)
    padded = gradients(policy, batch, settings, reference)
    packed = gradients(policy, batch, replace(settings, padding_free=True), reference)
    assert torch.allclose(packed[0], padded[0], atol=1e-6), (packed[0], padded[0])
    assert any(g.abs().sum() > 0 for g in padded[1].values())
    for name, gradient in padded[1].items():
        assert torch.allclose(packed[1][name], gradient, atol=1e-6, rtol=1e-4), name


def sgd_step(settings: UpdateSettings, lengths=LENGTHS, empty=(), **kwargs):
    policy = TrainingSetup(Precision(torch.float32, torch.float32), padding_free=settings.padding_free).prepare(model())
    batch = ragged_batch(policy, lengths, empty)
    optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
    metrics = policy_update(policy, optimizer, batch, settings, step=1, **kwargs)
    return policy.state_dict(), metrics


def assert_same_step(a, b, atol=1e-6):
    (weights_a, metrics_a), (weights_b, metrics_b) = a, b
    start = model().state_dict()
    assert any(not torch.equal(weights_a[name], start[name]) for name in start)  # the step moved weights
    for name, tensor in weights_a.items():
        assert torch.allclose(tensor, weights_b[name], atol=atol), name
    assert metrics_a["train/loss"] == pytest.approx(metrics_b["train/loss"], abs=1e-6)


@pytest.mark.parametrize("loss", ["grpo", "dapo", "gspo"])
def test_one_optimizer_step_equals_the_padded_one(loss):
    """Other micro-batches (3 rows padded, <= 1,000 tokens packed) and the trainer's recomputed old
    log-probs (truncate_ratio) on the packed path give the padded step."""
    settings = replace(PADDED, loss=loss, mini_batch_size=8, micro_batch_size=3)
    settings = replace(settings, loss_args=replace(settings.loss_args, truncate_ratio=2.0))
    padded = sgd_step(settings)
    packed = sgd_step(replace(settings, padding_free=True, max_tokens_per_micro_batch=1000))
    assert_same_step(padded, packed)
    assert padded[1]["train/padding_tokens"] > 1000 and packed[1]["train/padding_tokens"] == 0


def test_one_optimizer_step_with_kl_and_entropy_equals_the_padded_one():
    """The same micro-batch both ways: the KL and entropy terms are token means within a
    micro-batch, which accumulation over other groupings does not reproduce padded either."""
    settings = replace(PADDED, mini_batch_size=8, micro_batch_size=8, kl_coef=0.1, entropy_coef=0.01)
    reference = model(seed=1)
    padded = sgd_step(settings, reference=reference)
    packed = sgd_step(replace(settings, padding_free=True), reference=reference)
    assert_same_step(padded, packed)
    assert (
        packed[1]["train/kl"] == pytest.approx(padded[1]["train/kl"], rel=1e-4) and padded[1]["train/kl"] > 0
    )


def test_ranks_run_equal_numbers_of_packed_micro_batches(monkeypatch):
    """Each rank packs its half of the mini-batch; the rank with fewer rows pads with zero-weight passes."""
    calls, slices = [], []
    original_loss, original_slices = update.micro_loss, update.packed_slices
    monkeypatch.setattr(update, "micro_loss", lambda *a, **k: calls.append(1) or original_loss(*a, **k))
    monkeypatch.setattr(
        update, "packed_slices", lambda *a: slices.append(len(original_slices(*a))) or original_slices(*a)
    )
    settings = replace(PACKED, mini_batch_size=8, max_tokens_per_micro_batch=1000)
    for rank in range(2):
        calls.clear(), slices.clear()
        sgd_step(settings, rank=rank, world_size=2)
        assert len(calls) == max(slices)  # every rank computes both ranks' rows to agree on this
    assert min(slices) < max(slices)  # the halves differ, so the padding was needed


@pytest.mark.parametrize("setup", ["lora", "gradient_checkpointing"])
def test_lora_and_gradient_checkpointing_train_the_same_packed(setup):
    precision = Precision(torch.float32, torch.float32)
    if setup == "lora":
        training = TrainingSetup(precision, lora=LoraConfig(rank=4, alpha=8.0), base_name="tiny")
    else:
        training = TrainingSetup(precision, gradient_checkpointing=True)
    policy = training.prepare(model()).train()  # checkpointing acts in training mode only
    reference = training.reference(policy)
    batch = ragged_batch(policy, LENGTHS[:6])
    settings = replace(PADDED, kl_coef=0.1, entropy_coef=0.01)
    padded = gradients(policy, batch, settings, reference)
    packed = gradients(policy, batch, replace(settings, padding_free=True), reference)
    assert torch.allclose(packed[0], padded[0], atol=1e-6)
    trained = {name for name, p in policy.named_parameters() if p.requires_grad}
    assert any(padded[1][name].abs().sum() > 0 for name in trained)
    for name in trained:
        assert torch.allclose(packed[1][name], padded[1][name], atol=1e-6, rtol=1e-4), name


# ---------------------------------------------------------------- packed sequences stay apart


def packed_alone_and_beside(policy, inputs=PackedRow.model_inputs):
    """The last trajectory's log-probs packed alone, and packed after the first one; `inputs` makes
    the forward's arguments from a row."""
    batch = ragged_batch(policy, [300, 120])
    mask = batch.loss_mask[1:, :120]
    alone = pack(batch.input_ids[1:, :120], batch.attention_mask[1:, :120], mask)
    beside = pack(batch.input_ids, batch.attention_mask, batch.loss_mask)
    with torch.no_grad():
        solo, _ = forward_stats(policy, inputs(alone), alone.loss_mask, PACKED, False)
        pair, _ = forward_stats(policy, inputs(beside), beside.loss_mask, PACKED, False)
    return solo[alone.loss_mask], pair[beside.loss_mask][-int(mask.sum()) :]


def positions_run_on(row: PackedRow) -> dict:
    """Deliberately broken: positions do not restart, so transformers sees one long sequence."""
    return {**row.model_inputs(), "position_ids": torch.arange(row.input_ids.shape[1])[None]}


def with_a_cache(row: PackedRow) -> dict:
    """Deliberately broken: the default use_cache=True makes transformers skip packed detection."""
    return {key: value for key, value in row.model_inputs().items() if key != "use_cache"}


def bounds_merged(row: PackedRow) -> dict:
    """Deliberately broken: the boundaries name one sequence, so per-sequence attention spans both."""
    whole = torch.tensor([0, row.input_ids.shape[1]], dtype=torch.int32)
    return {**row.model_inputs(), "cu_seq_lens_q": whole, "cu_seq_lens_k": whole}


BROKEN = {"sdpa": (positions_run_on, with_a_cache), "eager": (positions_run_on, with_a_cache)}
BROKEN[PACKED_SDPA] = (bounds_merged,)  # it reads the boundaries (RoPE is relative: positions need not restart)


@pytest.mark.parametrize("attention", [PACKED_SDPA, "sdpa", "eager"])
def test_a_sequence_is_unchanged_by_another_packed_beside_it(attention):
    policy = model(attention=attention)
    alone, beside = packed_alone_and_beside(policy)
    assert torch.allclose(alone, beside, atol=2e-5)
    for broken in BROKEN[attention]:  # the check catches a leaking mask
        alone, leaked = packed_alone_and_beside(policy, broken)
        assert not torch.allclose(alone, leaked, atol=1e-2), broken.__name__


def test_bfloat16_packed_log_probs_stay_within_tolerance_of_padded():
    """Stated tolerance: bf16 compute packed vs padded, per-token log-probs within 0.01 nats at worst
    and 1e-3 on average (measured 1e-3 and 2e-5: the two paths' bf16 matmuls see other shapes;
    float32 agrees to 2e-5)."""
    policy = model()
    batch = ragged_batch(policy)
    bf16 = Precision(torch.bfloat16, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        padded, _ = token_stats(policy, batch, replace(PADDED, precision=bf16), entropy_grad=False)
        packed, _ = token_stats(policy, batch, replace(PACKED, precision=bf16), entropy_grad=False)
    gap = (packed - padded)[batch.loss_mask].abs()
    assert gap.max() < 0.01 and gap.mean() < 1e-3, (gap.max(), gap.mean())


# ---------------------------------------------------------------- bad input


def test_an_attention_without_packed_support_is_a_config_error_at_start():
    AttentionInterface.register("no_varlen_attention", sdpa_attention_forward)  # ignores positions
    policy = model()
    policy.set_attn_implementation("no_varlen_attention")
    with pytest.raises(
        ConfigError, match="no_varlen_attention.*padding_free: false.*sdpa.*flash_attention_2"
    ):
        TrainingSetup(Precision(torch.float32, torch.float32), padding_free=True).prepare(policy)
    TrainingSetup(Precision(torch.float32, torch.float32), padding_free=False).prepare(policy)  # padded: no check needed
    check_attention(model(attention="sdpa"))  # sdpa passes


@pytest.mark.parametrize(("attention", "trained_with"), [("sdpa", PACKED_SDPA), ("eager", "eager")])
def test_a_padding_free_setup_gives_an_sdpa_model_per_sequence_attention(attention, trained_with):
    setup = TrainingSetup(Precision(torch.float32, torch.float32), padding_free=True)
    assert setup.prepare(model(attention=attention)).config._attn_implementation == trained_with
    padded = TrainingSetup(Precision(torch.float32, torch.float32), padding_free=False).prepare(model(attention="sdpa"))
    assert padded.config._attn_implementation == "sdpa"


def test_a_trajectory_with_nothing_sampled_is_left_out_of_the_packed_rows():
    settings = replace(PADDED, mini_batch_size=8, micro_batch_size=8)
    padded = sgd_step(settings, empty=(0,))
    packed = sgd_step(replace(settings, padding_free=True), empty=(0,))
    assert_same_step(padded, packed)
    alone = sgd_step(replace(settings, padding_free=True), lengths=[40, 77])
    nothing = sgd_step(replace(settings, padding_free=True), lengths=[40, 77], empty=(0,))
    assert alone[1]["train/tokens"] > nothing[1]["train/tokens"] > 0


def test_a_mini_batch_with_nothing_sampled_trains_nothing_packed():
    settings = replace(PACKED, mini_batch_size=8, max_tokens_per_micro_batch=1000)
    weights, metrics = sgd_step(settings, lengths=[40, 77, 150], empty=(0, 1, 2))
    assert all(torch.equal(tensor, model().state_dict()[name]) for name, tensor in weights.items())
    assert metrics["train/tokens"] == 0 and metrics["train/optimizer_steps"] == 1


def test_a_budget_below_one_prompt_trains_each_trajectory_alone(caplog):
    """Every trajectory is over a 3-token budget: each is a row of its own, counted and logged."""
    settings = replace(PADDED, mini_batch_size=8, micro_batch_size=8)
    padded = sgd_step(settings, lengths=LENGTHS[:5])
    packed = sgd_step(replace(settings, padding_free=True, max_tokens_per_micro_batch=3), lengths=LENGTHS[:5])
    assert_same_step(padded, packed)
    assert packed[1]["train/oversized_sequences"] == 5
    assert "5 trajectories were longer than grpo.max_tokens_per_micro_batch (3)" in caplog.text


def test_the_config_flag_reaches_the_update_and_the_setup(make_cfg):
    cfg = make_cfg()  # on by default
    assert UpdateSettings.from_config(cfg).padding_free
    assert TrainingSetup.from_config(cfg, torch.device("cpu")).padding_free
    padded = make_cfg(grpo__padding_free=False)
    assert not UpdateSettings.from_config(padded).padding_free
    assert not TrainingSetup.from_config(padded, torch.device("cpu")).padding_free


async def test_a_run_with_padding_free_trains_the_step_it_trains_padded(make_cfg):
    """Through the Trainer: the config reaches the update, the attention check passes at start, and
    the step's loss is the padded run's (rollouts repeat per seed)."""
    _, padded = await run_one_step(make_cfg(grpo__steps=1, name="padded"))
    _, packed = await run_one_step(make_cfg(grpo__steps=1, grpo__padding_free=True, name="packed"))
    assert packed["train/optimizer_steps"] == padded["train/optimizer_steps"] >= 1
    assert packed["train/loss"] == pytest.approx(padded["train/loss"], abs=1e-5)
    assert packed["train/padding_tokens"] == 0
