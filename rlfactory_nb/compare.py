"""What did training change? One fixed trajectory scored by two policies, token by token.

Held-out reward says how much a run changed the policy; this says where. Each trajectory's exact
token ids are scored by `before` and by `after` (`engine.score`: one forward pass per trajectory per
policy, through the trainer's chunked log-prob head), so both see the same tokens and sampling noise
plays no part. For every sampled token (loss_mask 1) the comparison keeps both log-probs and their
difference; per turn the summed difference and a KL estimate; overall the tokens whose log-prob
moved most, by token text across trajectories: what the policy now says more, and less.

What a difference does and does not say (docs/compare.md): `change` is log p_after - log p_before
of one token *in this fixed context*. A token can become more likely because what precedes it
changed meaning for the new policy, not because the policy "likes" it more in general, and a
trajectory the new policy would never sample still gets scored. The per-turn KL is the k3 estimate
(exp(r) - 1 - r, r = log p_before - log p_after, summed over the turn's tokens) of KL(after ||
before): unbiased only when `after` sampled the trajectory, otherwise a gap measure on these tokens.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb._async import run_sync
from rlfactory_nb._views import view_of
from rlfactory_nb.algo.advantages import turn_index
from rlfactory_nb.errors import ArgumentTypeError, ConfigError, EngineRequestError
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.types import Trajectory

if TYPE_CHECKING:
    import pandas as pd

TOKEN_COLUMNS = ("trajectory", "turn", "position", "token_id", "token", "logprob_before", "logprob_after", "change")


@dataclass(frozen=True)
class Scorer:
    """Something that scores ids, with the tokenizer that names its tokens."""

    engine: Any
    """has `async score(token_ids) -> list[float]` (engines/base.py)"""
    tokenizer: Any
    label: str
    owned: bool
    """made here (from a Policy or a name): closed when the comparison is done"""


@dataclass(frozen=True)
class PolicyComparison:
    """Two policies' log-probs of the same trajectories. Tables are pandas DataFrames; `change` is
    always logprob_after - logprob_before (module docstring: what it does and does not say)."""

    before: str
    after: str
    trajectories: tuple[Trajectory, ...]
    tokens: pd.DataFrame
    """one row per sampled token: trajectory (index), turn, position (in response_ids), token_id,
    token (its text), logprob_before, logprob_after, change"""
    turns: pd.DataFrame
    """one row per assistant turn: trajectory, turn, tokens, change (summed), kl (k3 estimate, summed)"""
    summary: pd.DataFrame
    """one row per trajectory, sorted by total change (largest first): trajectory, id, tokens, change, kl"""
    tokenizer: Any = None

    def token_changes(self) -> pd.DataFrame:
        """Every token text's moves across trajectories: count, change (summed), mean_change,
        mean_prob_before, mean_prob_after; sorted by summed change, largest first."""
        frame = self.tokens.assign(
            prob_before=self.tokens["logprob_before"].map(math.exp), prob_after=self.tokens["logprob_after"].map(math.exp)
        )
        grouped = frame.groupby("token", sort=False).agg(
            count=("change", "size"),
            change=("change", "sum"),
            mean_change=("change", "mean"),
            mean_prob_before=("prob_before", "mean"),
            mean_prob_after=("prob_after", "mean"),
        )
        return grouped.sort_values("change", ascending=False).reset_index()

    def top_tokens(self, n: int = 10) -> pd.DataFrame:
        """The `n` token texts whose summed log-prob rose most ("more": what the policy now says
        more) and the `n` that fell most ("less"), with a `direction` column."""
        changes = self.token_changes()
        more = changes[changes["change"] > 0].head(n).assign(direction="more")
        less = changes[changes["change"] < 0].tail(n).iloc[::-1].assign(direction="less")
        import pandas as pd

        return pd.concat([more, less], ignore_index=True)

    def trajectory_tokens(self, index: int) -> pd.DataFrame:
        """The token rows of trajectory `index` (its position in `trajectories`)."""
        return self.tokens[self.tokens["trajectory"] == index].reset_index(drop=True)

    def view(self) -> Any:
        """A notebook widget (ComparisonView): token strips coloured by the change, per-turn bars,
        a trajectory selector sorted by total change, and the top tokens."""
        return view_of(self)


async def compare_policies(
    trajectories: Sequence[Trajectory], before: Any, after: Any, device: str = "auto"
) -> PolicyComparison:
    """Score `trajectories` with `before` and `after` and compare, token by token (module docstring).

    `before` / `after`: a Policy, a checkpoint folder (full or LoRA), a preset name, or an engine
    (anything with `score` and a `tokenizer`, e.g. `cluster.engine(...)`: it then runs on the
    cluster). Policies made here load on `device` and are closed at the end. Two tokenizers that
    differ fail before any scoring; a trajectory longer than a model's context fails naming it."""
    trajectories = tuple(trajectories)
    if not trajectories:
        raise ConfigError("compare_policies needs at least one trajectory")
    first = _scorer(before, device)
    try:
        second = _scorer(after, device)
    except BaseException:
        await _close(first)
        raise
    try:
        check_same_vocabulary(first, second)
        # One policy after the other: both may be engines over one shared model (the same Policy twice).
        old = await _score_all(first, trajectories)
        new = await _score_all(second, trajectories)
    finally:
        await asyncio.gather(_close(first), _close(second))
    return build_comparison(trajectories, old, new, first, second)


def compare_policies_sync(
    trajectories: Sequence[Trajectory], before: Any, after: Any, device: str = "auto"
) -> PolicyComparison:
    return run_sync(compare_policies(trajectories, before, after, device))


def _scorer(source: Any, device: str) -> Scorer:
    if hasattr(source, "score"):
        tokenizer = getattr(source, "tokenizer", None)
        if tokenizer is None:
            raise ArgumentTypeError(f"{type(source).__name__} can score but has no `tokenizer`: give a Policy or a checkpoint")
        return Scorer(source, tokenizer, str(getattr(source, "name", type(source).__name__)), owned=False)
    if isinstance(source, (str, Path)):
        source = Policy.load(source, device=device, log=lambda _: None)  # a LoRA on the wrong base fails here
    if not isinstance(source, Policy):
        raise ArgumentTypeError(
            f"compare_policies takes a Policy, a checkpoint folder, a preset name or an engine, got {type(source).__name__}"
        )
    return Scorer(source.engine("hf"), source.tokenizer, source.name or str(source.path), owned=True)


async def _close(scorer: Scorer) -> None:
    if scorer.owned:
        await scorer.engine.close()


def check_same_vocabulary(first: Scorer, second: Scorer) -> None:
    """Raise ValueError unless both tokenizers map the same texts to the same ids: a log-prob of
    token id 42 means nothing to a model for which 42 is another token."""
    one, two = first.tokenizer.get_vocab(), second.tokenizer.get_vocab()
    if one == two:
        return
    differing = sorted(set(one.items()) ^ set(two.items()), key=lambda item: item[1])
    text, _ = differing[0]
    raise ConfigError(
        f"{first.label!r} and {second.label!r} have different tokenizers ({len(one)} and {len(two)} tokens; "
        f"e.g. {text!r} is id {one.get(text)} in one and {two.get(text)} in the other): their log-probs of "
        "the same ids are not comparable"
    )


async def _score_all(scorer: Scorer, trajectories: tuple[Trajectory, ...]) -> list[list[float]]:
    return list(await asyncio.gather(*(_score_one(scorer, index, traj) for index, traj in enumerate(trajectories))))


async def _score_one(scorer: Scorer, index: int, traj: Trajectory) -> list[float]:
    """The log-probs of the sampled tokens of `traj`, in order."""
    try:
        scored = await scorer.engine.score(traj.prompt_ids + traj.response_ids)
    except ValueError as error:
        name = f" ({traj.id})" if traj.id else ""
        raise EngineRequestError(f"trajectory {index}{name}, scored by {scorer.label!r}: {error}") from error
    start = len(traj.prompt_ids) - 1  # scored[i] is about token i + 1
    return [scored[start + position] for position, mask in enumerate(traj.loss_mask) if mask]


def build_comparison(
    trajectories: tuple[Trajectory, ...], old: list[list[float]], new: list[list[float]], first: Scorer, second: Scorer
) -> PolicyComparison:
    """The three tables from each trajectory's sampled-token log-probs under both policies."""
    import pandas as pd

    rows = [row for index, traj in enumerate(trajectories) for row in _token_rows(index, traj, old[index], new[index], first.tokenizer)]
    tokens = pd.DataFrame(rows, columns=list(TOKEN_COLUMNS))
    ratio = tokens["logprob_before"] - tokens["logprob_after"]
    tokens_kl = tokens.assign(kl=ratio.map(math.expm1) - ratio)
    turns = tokens_kl.groupby(["trajectory", "turn"], as_index=False).agg(
        tokens=("change", "size"), change=("change", "sum"), kl=("kl", "sum")
    )
    per_trajectory = tokens_kl.groupby("trajectory").agg(tokens=("change", "size"), change=("change", "sum"), kl=("kl", "sum"))
    summary = pd.DataFrame({"trajectory": range(len(trajectories)), "id": [t.id for t in trajectories]})
    summary = summary.join(per_trajectory, on="trajectory").fillna({"tokens": 0, "change": 0.0, "kl": 0.0})
    summary = summary.astype({"tokens": int}).sort_values("change", ascending=False, kind="stable").reset_index(drop=True)
    return PolicyComparison(first.label, second.label, trajectories, tokens, turns, summary, first.tokenizer)


def _token_rows(index: int, traj: Trajectory, old: list[float], new: list[float], tokenizer: Any) -> list[tuple]:
    import torch

    turns = turn_index(torch.tensor(traj.loss_mask, dtype=torch.long)).tolist() if traj.loss_mask else []
    positions = [position for position, mask in enumerate(traj.loss_mask) if mask]
    ids = [traj.response_ids[position] for position in positions]
    texts = tokenizer.batch_decode([[token_id] for token_id in ids]) if ids else []
    return [
        (index, turns[position], position, token_id, text, before, after, after - before)
        for position, token_id, text, before, after in zip(positions, ids, texts, old, new)
    ]
