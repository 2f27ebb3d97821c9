"""The guessing game as an Environment: the model says a number, the game says higher or lower.

The row gives the range and the secret (`low`, `high`, `secret`; without a secret one is drawn from
the episode's seed). Each answer without a tool call is a guess: its last integer is read, and the
game replies "higher", "lower", or ends the episode when the guess is right or the guesses run out.
An answer with no number still costs a guess and is told how to answer.

The reward is 1 for a find on the first guess, 0.1 less for each further guess, 0 when the number
was never found: finding it fast (binary search over the hints) is what pays.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlfactory_nb.envs.base import Environment, Response
from rlfactory_nb.types import Turn

MAX_GUESSES = 4
_INTEGER = re.compile(r"-?\d+")


def read_guess(text: str) -> int | None:
    """The last integer in an answer (None when there is none).

    >>> read_guess("I think it is 7."), read_guess("12 or 13? 13"), read_guess("no idea")
    (7, 13, None)
    """
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


class Guess(Environment):
    """One game: a secret in [low, high], at most `max_guesses` guesses."""

    def __init__(self, max_guesses: int = MAX_GUESSES):
        self.max_guesses = max_guesses
        self.low, self.high, self.secret = 1, 8, 1
        self.guesses: list[int | None] = []
        self.solved = False

    def reset(self, row: dict[str, Any], *, seed: int) -> None:
        self.low, self.high = int(row.get("low", 1)), int(row.get("high", 8))
        self.secret = int(row["secret"]) if "secret" in row else random.Random(seed).randint(self.low, self.high)
        self.guesses, self.solved = [], False

    def respond(self, turn: Turn) -> Response:
        guess = read_guess(turn.answer if turn.answer is not None else turn.text)
        self.guesses.append(guess)
        self.solved = guess == self.secret
        out_of_guesses = len(self.guesses) >= self.max_guesses
        if self.solved or out_of_guesses:
            said = "Correct!" if self.solved else f"Out of guesses: it was {self.secret}."
            return Response([{"role": "user", "content": said}], done=True, reward=self.reward())
        if guess is None:
            hint = f"Answer with one number from {self.low} to {self.high}."
        else:
            hint = "Higher." if guess < self.secret else "Lower."
        return Response([{"role": "user", "content": hint}])

    def reward(self) -> float:
        return round(1.0 - 0.1 * (len(self.guesses) - 1), 3) if self.solved else 0.0

    def state(self) -> dict[str, Any]:
        return {"range": [self.low, self.high], "guesses": list(self.guesses), "solved": self.solved}
