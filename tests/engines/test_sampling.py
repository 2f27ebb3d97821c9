import torch

from rlfactory_nb.engines.sampling import sample_tokens, token_logprobs


def _sample_many(logits: torch.Tensor, temperature=1.0, top_p=1.0, top_k=-1, n=1000) -> torch.Tensor:
    """Sample one row n times with evenly spaced uniforms: exact frequencies, no randomness."""
    uniforms = (torch.arange(n) + 0.5) / n
    rows = logits.expand(n, -1)
    return sample_tokens(
        rows, torch.full((n,), temperature), torch.full((n,), top_p), torch.full((n,), top_k), uniforms
    )


def test_unfiltered_sampling_follows_softmax():
    probs = torch.tensor([0.5, 0.3, 0.2])
    counts = torch.bincount(_sample_many(probs.log()[None]), minlength=3)
    assert counts.tolist() == [500, 300, 200]


def test_top_p_keeps_the_smallest_set_reaching_p_and_renormalises():
    probs = torch.tensor([0.2, 0.5, 0.3])  # sorted: 1 (0.5), 2 (0.3), 0 (0.2)
    counts = torch.bincount(_sample_many(probs.log()[None], top_p=0.6), minlength=3)
    assert counts[0] == 0
    assert counts.tolist()[1:] == [625, 375]  # 0.5 : 0.3 renormalised


def test_top_k_and_temperature():
    probs = torch.tensor([0.2, 0.5, 0.3])
    assert set(_sample_many(probs.log()[None], top_k=1).tolist()) == {1}
    hot = torch.bincount(_sample_many(probs.log()[None], temperature=0.5), minlength=3)
    expected = probs**2 / (probs**2).sum() * 1000  # temperature 0.5 squares the probabilities
    assert torch.allclose(hot.float(), expected, atol=1.5)


def test_temperature_zero_is_argmax_and_rows_are_independent():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]])
    tokens = sample_tokens(
        logits, torch.tensor([0.0, 1.0]), torch.ones(2), torch.tensor([-1, 1]), torch.tensor([0.99, 0.99])
    )
    assert tokens.tolist() == [1, 0]


def test_token_logprobs_use_the_unmodified_distribution():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    expected = torch.log_softmax(logits, dim=-1)[0, 2]
    assert torch.isclose(token_logprobs(logits, torch.tensor([2]))[0], expected)


def test_a_rows_token_does_not_depend_on_the_other_rows_settings():
    """A seeded request must sample the same wherever the engine batches it."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 50, generator=generator).expand(4, -1)
    uniforms = torch.rand(1, generator=generator).expand(4)
    top_p, top_k = torch.tensor([1.0, 0.3, 1.0, 0.9]), torch.tensor([-1, -1, 5, 2])
    mixed = sample_tokens(logits, torch.ones(4), top_p, top_k, uniforms)
    for row in range(4):
        alone = sample_tokens(
            logits[:1], torch.ones(1), top_p[row : row + 1], top_k[row : row + 1], uniforms[:1]
        )
        assert mixed[row] == alone[0]
    # and the filters did act: the top-1-ish rows stay within their kept sets
    assert mixed[3] in logits[0].topk(2).indices
