"""What one policy update reports (`train/*` metrics): weighted means of the micro-batches' loss
metrics, grad norms per optimizer step, trained tokens, padding and oversized-sequence counts, and the
engine/trainer logprob gap measured before the first optimizer step (train/update.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


class UpdateTally:
    """Weighted means of per-micro-batch metrics, plus grad norms per optimizer step."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weight = 0.0
        self.grad_norms: list[float] = []
        self.tokens = 0.0
        self.gaps: list[Tensor] = []
        self.counts: dict[str, float] = {"padding_tokens": 0.0, "oversized_sequences": 0.0}

    def add(self, metrics: dict[str, float], weight: float) -> None:
        if weight:  # a zero-weight padding micro-batch trained no tokens
            self.tokens += metrics.get("num_tokens", 0.0)
        for key, value in metrics.items():
            if key not in ("num_tokens", "num_sequences"):
                self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.weight += weight

    def count(self, counts: dict[str, float]) -> None:
        """Totals over the step (every pass), not means."""
        for key, value in counts.items():
            self.counts[key] += value

    def add_gap(self, trainer: Tensor, engine: Tensor, mask: Tensor) -> None:
        """|trainer - engine| logprob of each sampled token, measured before any optimizer step."""
        self.gaps.append((trainer.float() - engine.float())[mask.bool()].abs())

    def add_step(self, grad_norm: float) -> None:
        self.grad_norms.append(grad_norm)

    def means(self) -> dict[str, float]:
        weight = self.weight or 1.0
        metrics = {f"train/{key}": value / weight for key, value in self.sums.items()}
        metrics["train/grad_norm"] = sum(self.grad_norms) / max(len(self.grad_norms), 1)
        metrics["train/optimizer_steps"] = len(self.grad_norms)
        metrics["train/tokens"] = self.tokens
        metrics.update({f"train/{key}": value for key, value in self.counts.items()})
        gaps = torch.cat(self.gaps) if self.gaps else torch.zeros(0)
        if gaps.numel():
            metrics["train/logprob_gap_mean"] = float(gaps.mean())
            metrics["train/logprob_gap_max"] = float(gaps.max())
        return metrics
