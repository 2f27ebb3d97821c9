"""Per-token log-probs and entropy of the sampled tokens, without a (rows, length, vocabulary) tensor.

The direct way (`response_logits` in train/update.py) asks the model for the logits of every response
position and reduces them: with Qwen3's 151,936-token vocabulary that is 0.6 MB per position in
float32, 5 GB for one 8k-token row, and log-sum-exp and entropy each want a float32 copy of the same
shape. Here the model's output layer is swapped, for the one forward, for `_TokenStatsHead`: it
receives the final hidden states (rows, positions, hidden), keeps only the positions whose next token
was sampled (loss_mask == 1: prompt and tool positions never need a distribution), and runs the
output layer and the log-softmax over chunks of `chunk` of those tokens. The autograd function saves
only the selected hidden states and recomputes each chunk's logits in backward, so peak memory is
two (chunk, vocabulary) float32 blocks, whatever the response length.

Why a swapped head rather than reading the output weight after the forward: under FSDP the weight is
only whole (unsharded) while the model's own forward runs, and under DDP gradients are only reduced
for computation that went through the wrapper's forward. The head runs inside that forward.

The values and gradients equal the direct path's (tests/train/test_logprobs.py); the chunked matmuls
run in `dtype` (the compute dtype) and every reduction in float32.

It lives with the engines (layer 2) because two callers need the same quantity: the trainer's update
(`rlfactory_nb.train.update`) and an engine's `score` (`sequence_logprobs`: every token of a fixed
sequence, as `rf.compare_policies` asks of two policies). One implementation serves both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from rlfactory_nb.errors import UnsupportedModelError


class _ChunkedTokenStats(torch.autograd.Function):
    """hidden (N, H), weight (V, H), targets (N,) -> (N, 2): [log p(target), entropy], float32.

    Each chunk's (n, V) blocks live in two buffers allocated once per call and rewritten in place
    (`_Workspace`): a fresh (1,024 x 151,936) float32 block is 622 MB, and allocating one per
    chunk and per intermediate (logits, log-sum-exp, exp, products) made the CPU allocator hand
    the pages back and fault them in again (about a third of a CPU step's time, as system time).
    The output weight's gradient accumulates in place (`addmm_`), not as a (V, H) copy per chunk."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, chunk: int, dtype: Any) -> Tensor:
        ctx.save_for_backward(hidden, weight, targets)
        ctx.chunk, ctx.dtype = chunk, dtype
        out = torch.empty((hidden.shape[0], 2), dtype=torch.float32, device=hidden.device)
        work = _Workspace(weight, hidden.shape[0], chunk, dtype)
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            log_p, p = work.distribution(hidden[rows])  # (n, V) float32 each
            out[rows, 0] = log_p.gather(-1, targets[rows, None]).squeeze(-1)
            out[rows, 1] = _entropy(p, log_p)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, targets = ctx.saved_tensors
        work = _Workspace(weight, hidden.shape[0], ctx.chunk, ctx.dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, hidden.shape[0], ctx.chunk):
            rows = slice(start, start + ctx.chunk)
            log_p, p = work.distribution(hidden[rows])
            grad_logits = _grad_logits(log_p, p, targets[rows], grad_out[rows])  # (n, V), over log_p
            grad_hidden[rows] = (grad_logits.to(ctx.dtype) @ work.weight).to(hidden.dtype)
            grad_weight.addmm_(grad_logits.T, hidden[rows].float())  # (V, H), in place
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


class _Workspace:
    """The output weight in the compute dtype and two float32 (chunk, V) buffers that every chunk of
    one forward or backward reuses."""

    def __init__(self, weight: Tensor, tokens: int, chunk: int, dtype: Any):
        self.weight, self.dtype = weight.to(dtype), dtype
        shape = (min(chunk, tokens), weight.shape[0])
        self.first = torch.empty(shape, dtype=torch.float32, device=weight.device)
        self.second = torch.empty_like(self.first)

    def distribution(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """(log p, p) over the vocabulary of a chunk's hidden states (n, H), in the two buffers."""
        n = hidden.shape[0]
        log_p, p = self.first[:n], self.second[:n]
        if self.dtype == torch.float32 and self.weight.dtype == torch.float32:
            torch.matmul(hidden.float(), self.weight.T, out=log_p)  # the logits
        else:
            log_p.copy_(hidden.to(self.dtype) @ self.weight.T)
        log_p.sub_(log_p.amax(dim=-1, keepdim=True))
        torch.exp(log_p, out=p)
        total = p.sum(dim=-1, keepdim=True)
        log_p.sub_(total.log())
        p.div_(total)
        return log_p, p


def _entropy(p: Tensor, log_p: Tensor) -> Tensor:
    """-sum p log p of each row of (n, V), as a batched dot product: no (n, V) temporary."""
    return -torch.bmm(p[:, None, :], log_p[:, :, None]).view(-1)


def _grad_logits(log_p: Tensor, p: Tensor, targets: Tensor, grad_out: Tensor) -> Tensor:
    """d(loss)/d(logits) of one chunk, in place over `log_p` (n, V); `p` is its exp.

    For p = softmax(z): d log p_y / dz = onehot(y) - p, and for the entropy H = -sum p log p,
    dH/dz = -p (log p + H). So grad = -p * (g_logprob + g_entropy * (log p + H)) + g_logprob * onehot(y).
    """
    g_logprob, g_entropy = grad_out[:, 0:1], grad_out[:, 1:2]  # (n, 1) each
    entropy = _entropy(p, log_p)[:, None]  # (n, 1)
    grad = log_p.add_(entropy).mul_(g_entropy).add_(g_logprob).mul_(p).neg_()
    return grad.scatter_add_(-1, targets[:, None], g_logprob)


class _TokenStatsHead(torch.nn.Module):
    """Stands in for the output layer during one forward: hidden (b, K, H) -> (b, K, 2) holding
    [log p(next token), entropy] at the selected positions, 0 elsewhere."""

    def __init__(
        self, output_layer: torch.nn.Module, targets: Tensor, select: Tensor, chunk: int, dtype: Any
    ):
        super().__init__()
        # A plain attribute, not a submodule: the swap must not change the model's parameter names.
        object.__setattr__(self, "output_layer", output_layer)
        self.targets, self.select, self.chunk, self.dtype = targets, select, chunk, dtype

    def forward(self, hidden: Tensor) -> Tensor:
        picked = hidden[self.select]  # (N, H)
        weight = self.output_layer.weight
        values = _ChunkedTokenStats.apply(picked, weight, self.targets[self.select], self.chunk, self.dtype)
        out = values.new_zeros((*hidden.shape[:2], 2))
        out[self.select] = values
        return out


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers causal LM inside DDP (`.module`), peft (`get_base_model()`) and
    adapter-disabling wrappers (`.model_to_run`)."""
    while True:
        if hasattr(model, "model_to_run"):
            model = model.model_to_run
        elif isinstance(getattr(model, "module", None), torch.nn.Module):
            model = model.module
        elif hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            return model


def supports_chunking(model: torch.nn.Module) -> bool:
    """True when the output layer is a bias-free linear layer the head can stand in for."""
    layer = causal_lm(model).get_output_embeddings()
    return isinstance(layer, torch.nn.Linear) and layer.bias is None


@contextlib.contextmanager
def _swapped_head(model: torch.nn.Module, head: torch.nn.Module) -> Iterator[None]:
    inner = causal_lm(model)
    original = inner.get_output_embeddings()
    inner.set_output_embeddings(head)
    try:
        yield
    finally:
        inner.set_output_embeddings(original)


def chunked_token_stats(
    model: torch.nn.Module, inputs: dict[str, Any], loss_mask: Tensor, start: int, chunk: int, dtype: Any
) -> tuple[Tensor, Tensor]:
    """(logprobs (B, L), entropy (B, L)) of every sampled token (loss_mask == 1), 0 elsewhere, with
    the alignment of `rlfactory_nb.train.batch`. `inputs` are the forward's: input_ids (B, L) and
    an attention mask, or a packed row's position ids. `start` is the first trained column (>= 1)."""
    input_ids = inputs["input_ids"]
    keep = input_ids.shape[1] - start + 1  # output positions start-1 .. L-1
    select = torch.zeros((input_ids.shape[0], keep), dtype=torch.bool, device=input_ids.device)
    select[:, :-1] = loss_mask[:, start:]  # position start-1+j predicts token start+j
    targets = torch.zeros_like(select, dtype=torch.long)
    targets[:, :-1] = input_ids[:, start:]
    inner = causal_lm(model)
    head = _TokenStatsHead(inner.get_output_embeddings(), targets, select, chunk, dtype)
    with _swapped_head(model, head):
        kept = model(**inputs, logits_to_keep=keep).logits
    padding = kept.new_zeros((input_ids.shape[0], start, 2))
    stats = torch.cat([padding, kept[:, :-1]], dim=1)  # (B, L, 2)
    return stats[..., 0], stats[..., 1]


def sequence_logprobs(model: torch.nn.Module, input_ids: Tensor, chunk: int, dtype: Any) -> Tensor:
    """log p(ids[i] | ids[:i]) for i = 1 .. L-1 of each row: input_ids (B, L) -> (B, L - 1) float32,
    from one forward through the chunked head (no (B, L, vocabulary) tensor)."""
    if not supports_chunking(model):
        layer = causal_lm(model).get_output_embeddings()
        raise UnsupportedModelError(
            f"scoring needs a bias-free linear output layer (transformers causal LMs have one); this model's "
            f"is {layer!r}"
        )
    scored = torch.ones_like(input_ids, dtype=torch.bool)
    scored[:, 0] = False  # the first token has no prefix to be predicted from
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    logprobs, _ = chunked_token_stats(model, inputs, scored, 1, chunk, dtype)
    return logprobs[:, 1:]
