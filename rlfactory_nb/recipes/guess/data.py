"""The guessing game's rows: a range of seven one-digit numbers (1-7, 2-8 or 3-9) and a secret in it.

    python -m rlfactory_nb.recipes.guess.data      # writes examples/guess/data/{train,heldout,train_ranges}.jsonl

Train and held-out rows come from different seeds (the same range and secret occur in both: there are
only 3 x 7 games; what is held out is the sample, the measurement is the policy's skill).
`train_ranges.jsonl` is the train rows with `draw_secret: true` (and no `ground_truth`): the
environment draws each episode's secret from its seed, so under `rollout.env_seed: sample` the
siblings of a group play different secrets (what the example trains on: bench/manual/guess_credit.md);
the row's own `secret` stays for players that read it (bench/_race.py's TRL game).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WIDTH = 7
LOWS = (1, 2, 3)
"""one-digit numbers, each one token of the tiny tokenizer: the game is about the search, not reading digits"""
DATA = Path(__file__).resolve().parents[3] / "examples" / "guess" / "data"
SPLITS = {"train": (0, 512), "heldout": (1, 256)}
"""split -> (seed, rows)"""
EXPLORE_SHARE = 1 / 3
"""train_explore.jsonl: the share of rows that start after an opening guess drawn from the range"""


def rows(seed: int, count: int) -> list[dict]:
    rng = random.Random(f"guess:{seed}")
    out = []
    for _ in range(count):
        low = rng.choice(LOWS)
        high = low + WIDTH - 1
        prompt = f"I picked a number from {low} to {high}. Guess it: answer with one number."
        secret = rng.randint(low, high)
        out.append({"messages": [{"role": "user", "content": prompt}], "low": low, "high": high,
                    "secret": secret, "ground_truth": str(secret)})
    return out


def drawn(row: dict) -> dict:
    """A row whose secret the Guess environment draws from the episode's seed (env.py)."""
    return {**{key: value for key, value in row.items() if key != "ground_truth"}, "draw_secret": True}


def exploring(rows: list[dict], share: float, seed: int = 0) -> list[dict]:
    """`rows` with an exploring start on about `share` of them: an `opening` guess drawn uniformly
    from the row's range, played before the model's first turn (env.py), so the states after every
    opening are trained, not only after the ones the policy prefers."""
    rng = random.Random(f"guess-opening:{seed}")
    out = []
    for row in rows:
        if rng.random() < share:
            row = {**row, "opening": [rng.randint(row["low"], row["high"])]}
        out.append(row)
    return out


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for split, (seed, count) in SPLITS.items():
        path = DATA / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows(seed, count)))
        print(f"{path}: {count} rows")
    ranges = DATA / "train_ranges.jsonl"
    ranges.write_text("".join(json.dumps(drawn(row)) + "\n" for row in rows(*SPLITS["train"])))
    print(f"{ranges}: {SPLITS['train'][1]} rows")
    explore = DATA / "train_explore.jsonl"
    explored = exploring([drawn(row) for row in rows(*SPLITS["train"])], EXPLORE_SHARE)
    explore.write_text("".join(json.dumps(row) + "\n" for row in explored))
    print(f"{explore}: {len(explored)} rows, {sum('opening' in row for row in explored)} with an opening")


if __name__ == "__main__":
    main()
