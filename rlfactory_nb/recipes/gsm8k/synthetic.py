"""GSM8K-style word problems made from templates, for running the example without the dataset.

Each template draws names and numbers from a seeded generator and writes the solution as GSM8K's
are written: one line per step with the calculation annotated (`3 * 4 = <<3*4=12>>12`) and a final
`#### n`. Answers are whole numbers, as GSM8K's are. Training and held-out problems come from
disjoint seeds, as the calculator task's do. The prompt is verl's GSM8K prompt, so synthetic rows
and verl's parquet look the same to the model and the reward.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlfactory_nb.errors import ConfigError

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
"""appended to every question, as verl's GSM8K preprocessing does"""
SEEDS = {"train": 0, "heldout": 1}
_NAMES = ("Natalia", "James", "Weng", "Betty", "Julie", "Mark", "Tina", "Ravi", "Alexis", "Ken")
_ITEMS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps")


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str
    """GSM8K's format: steps with <<calculation=result>> annotations, then `#### answer`"""
    answer: int

    def row(self, split: str, index: int) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": f"{self.question} {INSTRUCTION}"}],
            "ground_truth": str(self.answer),
            "data_source": "gsm8k_synthetic",
            "extra_info": {
                "split": split,
                "index": index,
                "question": self.question,
                "answer": self.solution,
            },
        }


def step(expression: str, value: int, text: str = "") -> str:
    """One solution line: `expression = <<expression=value>>value text`."""
    return f"{expression} = <<{expression}={value}>>{value}{text}"


def _restock(rng: random.Random) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    have, packs, per_pack = rng.randint(5, 60), rng.randint(2, 9), rng.randint(3, 12)
    bought, total = packs * per_pack, have + packs * per_pack
    question = (
        f"{name} has {have} {item}. {name} buys {packs} packs of {item} with {per_pack} {item} in each "
        f"pack. How many {item} does {name} have now?"
    )
    lines = [
        f"{name} buys {step(f'{packs}*{per_pack}', bought)} {item}.",
        f"Now {name} has {step(f'{have}+{bought}', total)} {item}.",
    ]
    return Problem(question, "\n".join([*lines, f"#### {total}"]), total)


def _two_days(rng: random.Random) -> Problem:
    item, price = rng.choice(_ITEMS), rng.randint(2, 15)
    monday, more = rng.randint(10, 80), rng.randint(3, 30)
    tuesday, sold = monday + more, 2 * monday + more
    question = (
        f"A shop sells {item} for ${price} each. It sold {monday} {item} on Monday and {more} more on "
        f"Tuesday than on Monday. How many dollars did it make over the two days?"
    )
    lines = [
        f"On Tuesday it sold {step(f'{monday}+{more}', tuesday)} {item}.",
        f"Over the two days it sold {step(f'{monday}+{tuesday}', sold)} {item}.",
        f"It made {step(f'{sold}*{price}', sold * price)} dollars.",
    ]
    return Problem(question, "\n".join([*lines, f"#### {sold * price}"]), sold * price)


def _savings(rng: random.Random) -> Problem:
    name, wage, hours, weeks = rng.choice(_NAMES), rng.randint(8, 25), rng.randint(5, 20), rng.randint(2, 6)
    earned = wage * hours * weeks
    spent = rng.randint(1, earned // 10) * 10 if earned >= 20 else earned
    question = (
        f"{name} earns ${wage} an hour and works {hours} hours a week. After {weeks} weeks, {name} "
        f"spends ${spent} on a bike. How many dollars does {name} have left?"
    )
    weekly = wage * hours
    lines = [
        f"{name} earns {step(f'{wage}*{hours}', weekly)} dollars a week.",
        f"In {weeks} weeks that is {step(f'{weekly}*{weeks}', earned)} dollars.",
        f"{name} has {step(f'{earned}-{spent}', earned - spent)} dollars left.",
    ]
    return Problem(question, "\n".join([*lines, f"#### {earned - spent}"]), earned - spent)


def _reading(rng: random.Random) -> Problem:
    name, first, days, second, more_days = (
        rng.choice(_NAMES), rng.randint(5, 30), rng.randint(2, 7), rng.randint(5, 30), rng.randint(2, 7),
    )  # fmt: skip
    read = first * days + second * more_days
    pages = read + rng.randint(10, 200)
    question = (
        f"{name}'s book has {pages} pages. {name} reads {first} pages a day for {days} days, then "
        f"{second} pages a day for {more_days} days. How many pages are left to read?"
    )
    lines = [
        f"First {name} reads {step(f'{first}*{days}', first * days)} pages.",
        f"Then {name} reads {step(f'{second}*{more_days}', second * more_days)} pages.",
        f"In all {name} reads {step(f'{first * days}+{second * more_days}', read)} pages.",
        f"{step(f'{pages}-{read}', pages - read)} pages are left.",
    ]
    return Problem(question, "\n".join([*lines, f"#### {pages - read}"]), pages - read)


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (_restock, _two_days, _savings, _reading)


def problems(n: int, seed: int) -> list[Problem]:
    rng = random.Random(f"gsm8k:{seed}")
    return [rng.choice(TEMPLATES)(rng) for _ in range(n)]


def dataset(split: str, n: int) -> list[dict[str, Any]]:
    """`n` rows of "train" or "heldout" (disjoint seeds), in the layout verl's GSM8K parquet loads to."""
    if split not in SEEDS:
        raise ConfigError(f"split must be one of {', '.join(SEEDS)}, got {split!r}")
    return [problem.row(split, index) for index, problem in enumerate(problems(n, SEEDS[split]))]
