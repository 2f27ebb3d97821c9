"""NL2SQL questions with gold SQL, made from templates over the shop database, and their split.

Each template pairs a question with its SQL and names the values it is filled with (a city, a
year, a product, ...). Every filling is one question; its gold result is computed by running the
gold SQL on the database, so a row carries what the reward compares with and the reward never runs
gold SQL itself. Questions whose result is empty or NULL are dropped: any wrong query that also
returns nothing would score as right. A question is held out when a hash of its text says so (one
in five), so the held-out split is fixed whatever the seed, and never trained on.

Only a question that asks for an order ("from the most to the least expensive") is compared in
order; its gold SQL breaks ties by name so that the order is one.
"""

from __future__ import annotations

import functools
import itertools
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import ConfigError
from rlfactory_nb.recipes.nl2sql.database import CITIES, CUSTOMERS, PRODUCTS, SCHEMA, YEARS, ensure_database
from rlfactory_nb.recipes.nl2sql.query import run_query
from rlfactory_nb.types import Message

SPLITS = ("train", "heldout")
HELDOUT_EVERY = 5
GOLD_MAX_ROWS = 20
"""a gold result has at most this many rows, so it fits the tool's answer the model reads"""

SYSTEM_PROMPT = (
    "Answer the user's question about a shop's SQLite database with one SELECT query. Tables:\n"
    f"{SCHEMA}\n"
    "You can run queries with the sql tool to check them. "
    "Give the final query between <answer> and </answer>."
)

VALUES: dict[str, tuple[Any, ...]] = {
    "city": CITIES,
    "year": YEARS,
    "category": tuple(PRODUCTS),
    "product": tuple(name for names in PRODUCTS.values() for name in names),
    "customer": CUSTOMERS,
    "count": (3, 4, 5, 6, 7, 8),
}
"""what each template slot is filled with"""


@dataclass(frozen=True)
class Template:
    question: str
    sql: str
    ordered: bool = False
    """the question asks for an order, so results are compared in order"""

    @property
    def slots(self) -> list[str]:
        return [slot for slot in VALUES if f"{{{slot}}}" in self.question]


_JOIN = "FROM orders o JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = o.product_id"
TEMPLATES = (
    Template("How many customers live in {city}?", "SELECT COUNT(*) FROM customers WHERE city = '{city}'"),
    Template(
        "List the names of the {category} products.",
        "SELECT name FROM products WHERE category = '{category}'",
    ),
    Template(
        "List the {category} products from the most to the least expensive.",
        "SELECT name FROM products WHERE category = '{category}' ORDER BY price DESC, name",
        ordered=True,
    ),
    Template(
        "What is the average price of the {category} products?",
        "SELECT AVG(price) FROM products WHERE category = '{category}'",
    ),
    Template(
        "How many orders did {customer} place?", f"SELECT COUNT(*) {_JOIN} WHERE c.name = '{{customer}}'"
    ),
    Template(
        "How many units of the {product} were ordered in total?",
        f"SELECT SUM(o.quantity) {_JOIN} WHERE p.name = '{{product}}'",
    ),
    Template(
        "Which customers from {city} signed up in {year}?",
        "SELECT name FROM customers WHERE city = '{city}' AND signup_year = {year}",
    ),
    Template(
        "How many orders were placed in {year}?",
        "SELECT COUNT(*) FROM orders WHERE order_date LIKE '{year}-%'",
    ),
    Template(
        "Which cities have more than {count} customers?",
        "SELECT city FROM customers GROUP BY city HAVING COUNT(*) > {count}",
    ),
    Template(
        "What revenue did the {category} products bring in {year}?",
        f"SELECT SUM(o.quantity * p.price) {_JOIN} WHERE p.category = '{{category}}' AND o.order_date LIKE '{{year}}-%'",
    ),
    Template(
        "Which customers bought the {product}?",
        f"SELECT DISTINCT c.name {_JOIN} WHERE p.name = '{{product}}'",
    ),
    Template(
        "List the three products that sold the most units in {year}, best first.",
        f"SELECT p.name {_JOIN} WHERE o.order_date LIKE '{{year}}-%' GROUP BY p.id ORDER BY SUM(o.quantity) DESC, p.name LIMIT 3",
        ordered=True,
    ),
)


@dataclass(frozen=True)
class Question:
    question: str
    sql: str
    ordered: bool
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    template: int

    @property
    def split(self) -> str:
        return "heldout" if zlib.crc32(self.question.encode()) % HELDOUT_EVERY == 0 else "train"

    def row(self) -> dict[str, Any]:
        """A dataset row: the prompt, and the gold SQL with its result as the ground truth."""
        return {
            "messages": prompt_messages(self.question),
            "ground_truth": {
                "sql": self.sql,
                "columns": list(self.columns),
                "rows": [list(row) for row in self.rows],
                "ordered": self.ordered,
            },
            "data_source": "nl2sql_synthetic",
            "extra_info": {"split": self.split, "template": self.template},
        }


def prompt_messages(question: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]


def dataset(split: str, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """At most `n` rows of `split` ("train" or "heldout"), in an order shuffled by `seed`. There are
    a few hundred questions in all: asking for more gives them all."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    chosen = [question for question in questions(ensure_database()) if question.split == split]
    random.Random(f"nl2sql:{split}:{seed}").shuffle(chosen)
    return [question.row() for question in chosen[:n]]


@functools.cache
def questions(database: Path) -> tuple[Question, ...]:
    """Every filling of every template whose gold result on `database` is worth asking for."""
    found = []
    for number, template in enumerate(TEMPLATES):
        for values in itertools.product(*(VALUES[slot] for slot in template.slots)):
            filling = dict(zip(template.slots, values, strict=True))
            sql = template.sql.format(**filling)
            result = run_query(database, sql, max_rows=GOLD_MAX_ROWS)
            if result.rows and not result.truncated and result.rows != ((None,),):
                text = template.question.format(**filling)
                found.append(Question(text, sql, template.ordered, result.columns, result.rows, number))
    return tuple(found)
