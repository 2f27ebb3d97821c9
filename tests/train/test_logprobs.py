"""Chunked log-probs and entropy equal the full-logits path, in values and in gradients."""

import pytest
import torch

from rlfactory_nb.algo.losses import masked_mean
from rlfactory_nb.models.precision import Precision
from rlfactory_nb.train.update import UpdateSettings, token_stats

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch


def stats_and_gradients(settings: UpdateSettings, entropy_weight: float = 0.5):
    model = tiny_random_qwen3()
    batch = hand_batch()
    logprobs, entropies = token_stats(model, batch, settings, entropy_grad=True)
    mask = batch.loss_mask
    objective = (logprobs * mask).sum() + entropy_weight * masked_mean(entropies, mask)
    objective.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return logprobs.masked_fill(~mask, 0).detach(), entropies.masked_fill(~mask, 0).detach(), grads


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_chunked_values_and_gradients_equal_the_full_logits_path(chunk):
    direct = stats_and_gradients(UpdateSettings(logprob_chunk_tokens=None))
    chunked = stats_and_gradients(UpdateSettings(logprob_chunk_tokens=chunk))
    assert torch.allclose(chunked[0], direct[0], atol=1e-5)
    assert torch.allclose(chunked[1], direct[1], atol=1e-5)
    assert direct[0].abs().sum() > 0 and direct[1].sum() > 0  # the test compares real values
    for name, gradient in direct[2].items():
        assert torch.allclose(chunked[2][name], gradient, atol=1e-5, rtol=1e-4), name


def test_chunked_path_under_bfloat16_autocast_stays_close_to_float32():
    bf16 = UpdateSettings(precision=Precision(torch.bfloat16, torch.float32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = stats_and_gradients(bf16)
    high = stats_and_gradients(UpdateSettings())
    assert torch.allclose(low[0], high[0], atol=0.05)
    assert low[2]["model.embed_tokens.weight"].dtype == torch.float32  # gradients land on the master


def test_the_output_layer_is_restored_after_the_forward():
    model = tiny_random_qwen3()
    head = model.get_output_embeddings()
    batch = hand_batch()
    token_stats(model, batch, UpdateSettings(), entropy_grad=False)
    assert model.get_output_embeddings() is head
    assert set(model.state_dict()) == set(tiny_random_qwen3().state_dict())
