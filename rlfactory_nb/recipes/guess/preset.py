"""The tiny-guess preset: tiny-calculator warm-started on the guessing game, as tiny-calculator was
warm-started on its own task.

GRPO only reinforces what a policy already does sometimes. The tiny-calculator preset knows the chat
format and copies digits, but has never answered with a bare number or read "Higher." as a hint. A
short supervised pass on synthetic games (recipes/guess) teaches it the format of play: the teacher
guesses a number drawn at random from the interval the hints still allow, so the warm-started player
answers in range and mostly keeps to the hints, but does not bisect. Bisecting finds the number in
fewer guesses and never runs out, which the reward pays for: the room GRPO has to improve.

    rlfactory-nb preset build tiny-guess      # about 40 s on 2 cores, deterministic

The games are encoded as the tiny preset's rollouts are (non-thinking: `reasoning_mode.THINKING`).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.models.presets.warmstart import (
    encode_conversation,
    prefix_shared_loss,
    save_build,
    shared_prefix_length,
)
from rlfactory_nb.recipes.guess.data import LOWS, WIDTH, rows
from rlfactory_nb.recipes.guess.env import MAX_GUESSES
from rlfactory_nb.types import Message

GUESS_RECIPE_VERSION = 1
"""bump when the game or the teacher changes in code"""
TRAIN_SEED = 100
"""games drawn for the warm-start: another seed than the train (0) and held-out (1) rows"""


@dataclass(frozen=True)
class GuessWarmStart:
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0


def recipe(warm: GuessWarmStart = GuessWarmStart()) -> dict[str, Any]:
    """What the build depends on besides the tiny-calculator weights it starts from."""
    game = {"width": WIDTH, "lows": list(LOWS), "max_guesses": MAX_GUESSES, "first_row": rows(TRAIN_SEED, 1)}
    return {"version": GUESS_RECIPE_VERSION, "warm_start": dataclasses.asdict(warm), "game": game}


def teacher_game(rng: random.Random, row: dict) -> list[Message]:
    """One game played by the teacher: a random guess among the numbers the hints still allow."""
    low, high, secret = row["low"], row["high"], row["secret"]
    messages: list[Message] = list(row["messages"])
    for _ in range(MAX_GUESSES):
        guess = rng.randint(low, high)
        messages.append({"role": "assistant", "content": str(guess)})
        if guess == secret:
            break
        if guess < secret:
            low = guess + 1
            messages.append({"role": "user", "content": "Higher."})
        else:
            high = guess - 1
            messages.append({"role": "user", "content": "Lower."})
    if messages[-1]["role"] == "user":  # out of guesses: the last hint is never answered
        messages.pop()
    return messages


def build(
    path: Path, source: Path, warm: GuessWarmStart = GuessWarmStart(), log: Callable[[str], None] = print
) -> Path:
    """Warm-start a copy of `source` (the tiny-calculator folder) on teacher games; save it to `path`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"building tiny-guess (once per recipe, about 40 s on 2 cores) into {path}")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    metrics = _train(model, tokenizer, warm, log)
    save_build(path, model, tokenizer, metrics)
    log(f"tiny-guess ready: {metrics}")
    return path


def _train(model: Any, tokenizer: Any, warm: GuessWarmStart, log: Callable[[str], None]) -> dict[str, float]:
    torch.manual_seed(warm.seed)
    rng = random.Random(warm.seed)
    games = rows(TRAIN_SEED, warm.steps * warm.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=warm.lr, weight_decay=0.01, betas=(0.9, 0.95))
    started, loss = time.monotonic(), torch.tensor(0.0)
    model.train()
    for step in range(warm.steps):
        for group in optimizer.param_groups:  # 20 warm-up steps, then cosine down to a tenth
            group["lr"] = warm.lr * min(1.0, (step + 1) / 20) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / warm.steps)))
        batch = [encode_conversation(tokenizer, teacher_game(rng, row), [])
                 for row in games[step * warm.batch_size:(step + 1) * warm.batch_size]]
        loss = prefix_shared_loss(model, batch, shared_prefix_length(batch), tokenizer.pad_token_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % 50 == 0:
            log(f"tiny-guess warm-start step {step + 1}/{warm.steps}: loss {loss.item():.3f} ({time.monotonic() - started:.0f} s)")
    model.eval()
    return {"loss": round(loss.item(), 4), "steps": warm.steps, "seconds": round(time.monotonic() - started, 1)}
