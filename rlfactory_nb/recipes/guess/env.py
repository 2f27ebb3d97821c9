"""The guessing game as an Environment: the model says a number, the game says higher or lower.

The row gives the range and the secret (`low`, `high`, `secret`; without a secret, or with
`draw_secret: true`, one is drawn from the episode's seed: the example's training rows ask for that,
so under `rollout.env_seed: sample` a group's siblings play different secrets, and keep a `secret`
for players that need one in the row, such as bench/_race.py's TRL game). Each answer without a tool call is a guess: its last integer is read, and the
game replies "higher", "lower", or ends the episode when the guess is right or the guesses run out.
An answer with no number still costs a guess and is told how to answer.
A row's `opening` (a list of guesses) is an exploring start: the game begins with those guesses
played and answered, so the states after them are trained whatever the policy opens with (the
secret is then drawn among the numbers not yet guessed).

The reward is 1 for a find on the first guess, 0.1 less for each further guess; a game lost earns at
most 0.2, for the share of its guesses that kept to the hints. Finding it fast (binary search over
the hints) is what pays; keeping to the hints is the step towards it.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlfactory_nb.envs.base import Environment, Reset, Response
from rlfactory_nb.errors import DatasetError
from rlfactory_nb.types import Turn

MAX_GUESSES = 3
HINT_CREDIT = 0.2
"""an episode that never finds the number earns this times the share of its guesses that kept to
the range and the hints: a denser signal than the find alone, below any find's reward (0.7 at least)"""
_INTEGER = re.compile(r"-?\d+")


def read_guess(text: str) -> int | None:
    """The last integer in an answer (None when there is none).

    >>> read_guess("I think it is 7."), read_guess("12 or 13? 13"), read_guess("no idea")
    (7, 13, None)
    """
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


def worst_case_share(guess: int | None, allowed: tuple[int, int]) -> float:
    """The share of the `allowed` numbers a guess rules out whatever the reply: a miss leaves the
    larger side (0 for no number or one outside them).

    >>> worst_case_share(5, (2, 8)), worst_case_share(4, (2, 8)), worst_case_share(9, (2, 8))
    (0.5714285714285714, 0.4285714285714286, 0.0)
    """
    low, high = allowed
    if guess is None or not low <= guess <= high:
        return 0.0
    return 1.0 - max(guess - low, high - guess) / (high - low + 1)


class Guess(Environment):
    """One game: a secret in [low, high], at most `max_guesses` guesses."""

    guess_credit = 0.0
    """> 0: each guess the game goes on after is paid this times its `worst_case_share` with its
    hint (`Response.reward`), a reward per guess that `grpo.advantage: turn` or `step_groups` with
    `grpo.gamma` < 1 credits to that guess; the episode's score stays `reward()`"""

    def __init__(self, max_guesses: int = MAX_GUESSES):
        self.max_guesses = max_guesses
        self.low, self.high, self.secret = 1, 7, 1
        self.guesses: list[int | None] = []
        self.hints: list[str] = []
        """the game's reply to each guess but the last ("higher", "lower", "none": no number read)"""
        self.kept_to_hints = 0
        """guesses inside the interval the range and the earlier hints still allowed"""
        self.allowed = (1, 7)
        self.solved = False

    def reset(self, row: dict[str, Any], *, seed: int) -> Reset | None:
        self.low, self.high = int(row.get("low", 1)), int(row.get("high", 7))
        opening = self._opening(row.get("opening", []))
        fixed = "secret" in row and not row.get("draw_secret", False)
        unguessed = [n for n in range(self.low, self.high + 1) if n not in opening]
        self.secret = int(row["secret"]) if fixed else random.Random(seed).choice(unguessed)
        self.guesses, self.hints, self.solved = [], [], False
        self.kept_to_hints, self.allowed = 0, (self.low, self.high)
        return self._replay(opening) if opening else None

    def _opening(self, value: Any) -> list[int]:
        """The row's `opening`: a list of fewer than `max_guesses` integers in the range."""
        if not isinstance(value, list) or not all(type(g) is int and self.low <= g <= self.high for g in value):
            raise DatasetError(f"the row's opening must be a list of numbers from {self.low} to {self.high}, got {value!r:.80}")
        if len(value) >= self.max_guesses:
            raise DatasetError(f"the row's opening {value} must leave a guess: at most {self.max_guesses - 1} numbers")
        return value

    def _replay(self, opening: list[int]) -> Reset:
        """An exploring start: the row's `opening` guesses played before the model's first turn, each
        with the game's hint, as the conversation the model continues."""
        if self.secret in opening:
            raise DatasetError(f"the row's opening {opening} must miss the secret {self.secret}: drop it or draw the secret (draw_secret: true)")
        messages: list[dict[str, str]] = []
        for guess in opening:
            self._play(guess)
            messages += [{"role": "assistant", "content": str(guess)}, {"role": "user", "content": self._hint(guess)}]
        return Reset(messages)

    def respond(self, turn: Turn) -> Response:
        guess = read_guess(turn.answer if turn.answer is not None else turn.text)
        ruled_out = worst_case_share(guess, self.allowed)
        self._play(guess)
        if self.solved or len(self.guesses) >= self.max_guesses:
            said = "Correct!" if self.solved else f"Out of guesses: it was {self.secret}."
            return Response([{"role": "user", "content": said}], done=True, reward=self.reward())
        credit = round(self.guess_credit * ruled_out, 3) if self.guess_credit else None
        return Response([{"role": "user", "content": self._hint(guess)}], reward=credit)

    def _play(self, guess: int | None) -> None:
        self.guesses.append(guess)
        self.solved = guess == self.secret
        self._narrow(guess)

    def _hint(self, guess: int | None) -> str:
        """The game's reply to a guess it goes on after, recorded in `hints`."""
        if guess is None:
            self.hints.append("none")
            return f"Answer with one number from {self.low} to {self.high}."
        hint = "Higher." if guess < self.secret else "Lower."
        self.hints.append(hint.rstrip(".").lower())
        return hint

    def reward(self) -> float:
        if self.solved:
            return round(1.0 - 0.1 * (len(self.guesses) - 1), 3)
        return round(HINT_CREDIT * self.kept_to_hints / max(1, len(self.guesses)), 3)

    def _narrow(self, guess: int | None) -> None:
        low, high = self.allowed
        if guess is None or not low <= guess <= high:
            return
        self.kept_to_hints += 1
        if guess != self.secret:
            self.allowed = (guess + 1, high) if guess < self.secret else (low, guess - 1)

    def state(self) -> dict[str, Any]:
        """What the player has seen: the range, its guesses and the replies (never the secret), so
        that equal states are equal observations even where the siblings play different secrets
        (rows without one under `rollout.env_seed: sample`, or `grpo.step_group_scope: batch`)."""
        return {"range": [self.low, self.high], "guesses": list(self.guesses), "hints": list(self.hints),
                "solved": self.solved}


class NarrowingGuess(Guess):
    """The game with a reward per guess (`Guess.guess_credit`): what a guess rules out is paid when
    it is made, whatever the later guesses do (bench/manual/guess_credit.md)."""

    guess_credit = 0.5
