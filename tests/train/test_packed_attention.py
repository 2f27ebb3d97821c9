"""Per-sequence sdpa (`PACKED_SDPA`): a packed row pays each sequence's attention and no more, and
every other forward (a padded batch, generation with a cache) is transformers' sdpa, bit for bit."""

import torch
from tiny_models import random_qwen3

from rlfactory_nb.models import packed_attention
from rlfactory_nb.models.packed_attention import PACKED_SDPA
from rlfactory_nb.train.packing import pack


def pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same random weights with stock sdpa and with PACKED_SDPA."""
    stock, packed = random_qwen3(seed, max_positions=1024), random_qwen3(seed, max_positions=1024)
    packed.set_attn_implementation(PACKED_SDPA)
    return stock, packed


def test_a_packed_row_runs_attention_on_each_sequence_alone(monkeypatch):
    lengths = [300, 7, 120, 41]
    ids = torch.randint(0, 200, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(0))
    attention_mask = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()
    row = pack(ids, attention_mask, attention_mask.bool())
    assert row.cu_seq_lens.tolist() == [0, 300, 307, 427, 468]
    seen, sdpa = [], torch.nn.functional.scaled_dot_product_attention
    spy = lambda query, *args, **kwargs: seen.append(query.shape[2]) or sdpa(query, *args, **kwargs)
    monkeypatch.setattr(packed_attention.torch.nn.functional, "scaled_dot_product_attention", spy)
    _, model = pair()
    with torch.no_grad():
        packed = model(**row.model_inputs()).logits[0]
    assert seen == lengths * model.config.num_hidden_layers  # never the row's 468 tokens at once
    monkeypatch.undo()
    for index, length in enumerate(lengths):  # each sequence as if it were alone
        with torch.no_grad():
            alone = model(input_ids=ids[index : index + 1, :length]).logits[0]
        start = int(row.cu_seq_lens[index])
        assert torch.allclose(packed[start : start + length], alone, atol=1e-5)


def test_a_padded_batch_and_generation_are_stock_sdpa():
    stock, packed = pair()
    ids = torch.randint(0, 200, (3, 40), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :9] = 0  # left padding, as generation has it
    with torch.no_grad():
        assert torch.equal(
            stock(input_ids=ids, attention_mask=attention_mask).logits,
            packed(input_ids=ids, attention_mask=attention_mask).logits,
        )
        settings = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
        a = stock.generate(ids, attention_mask=attention_mask, **settings)
        b = packed.generate(ids, attention_mask=attention_mask, **settings)
    assert torch.equal(a, b)


def test_gradients_through_per_sequence_attention_equal_each_sequence_alone():
    _, model = pair()
    lengths = [50, 9, 23]
    ids = torch.randint(0, 200, (sum(lengths),), generator=torch.Generator().manual_seed(2))
    row = pack(
        torch.nn.utils.rnn.pad_sequence(list(ids.split(lengths)), batch_first=True),
        (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long(),
        (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]),
    )
    model.zero_grad()
    model(**row.model_inputs()).logits.square().mean(dim=-1).sum().backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    for part in ids.split(lengths):
        model(input_ids=part[None]).logits.square().mean(dim=-1).sum().backward()
    for name, p in model.named_parameters():
        assert torch.allclose(packed[name], p.grad, atol=1e-6, rtol=1e-4), name
