"""Warm-start the guessing game's player from the tiny-calculator preset, as that preset was made.

GRPO only reinforces what a policy already does sometimes. The tiny-calculator preset knows the chat
format and copies digits, but has never answered with a bare number or read "Higher." as a hint. A
short supervised pass on synthetic games teaches it the format of play: the teacher guesses a number
drawn at random from the interval the hints still allow, so the warm-started player answers in range
and mostly keeps to the hints, but does not bisect. Bisecting finds the number in fewer guesses,
which the reward pays for: the room GRPO has to improve.

    python -m rlfactory_nb.recipes.guess.warmstart OUT_DIR [--steps 300]

Deterministic for a seed and step count; the result is a Hugging Face folder (`model.name: OUT_DIR`).
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import time
from pathlib import Path

import torch

from rlfactory_nb.models.presets import preset_path
from rlfactory_nb.models.presets.warmstart import (
    encode_conversation,
    prefix_shared_loss,
    shared_prefix_length,
)
from rlfactory_nb.recipes.guess.data import rows
from rlfactory_nb.recipes.guess.env import MAX_GUESSES
from rlfactory_nb.types import Message

TRAIN_SEED = 100
"""games drawn for the warm-start: another seed than the train (0) and held-out (1) rows"""


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


def warm_start(out: Path, steps: int = 300, batch_size: int = 32, lr: float = 3e-3, seed: int = 0) -> dict:
    """Train a copy of tiny-calculator on teacher games; save it to `out`; return the last loss."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = preset_path("tiny-calculator")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    games = rows(TRAIN_SEED, steps * batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    started, loss = time.monotonic(), torch.tensor(0.0)
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        batch = [encode_conversation(tokenizer, teacher_game(rng, row), [])
                 for row in games[step * batch_size:(step + 1) * batch_size]]
        loss = prefix_shared_loss(model, batch, shared_prefix_length(batch), tokenizer.pad_token_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % 50 == 0:
            print(f"guess warm-start step {step + 1}/{steps}: loss {loss.item():.3f} ({time.monotonic() - started:.0f} s)", flush=True)
    model.eval()
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"loss": loss.item(), "steps": steps, "seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print(warm_start(args.out, args.steps))


if __name__ == "__main__":
    main()
