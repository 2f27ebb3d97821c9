"""The shop's world: customers, products and orders generated from a seed, and tasks over them.

Built offline and deterministically: `template()` makes the seed database in memory once per process,
and every episode gets its own SQLite file copied from it (`episode_database`), so two trajectories
never write into one database and the file is gone when the episode closes. The tasks in data/*.jsonl
are written by `python -m rlfactory_nb.recipes.shop.build_data` from the same seed.
"""

from __future__ import annotations

import functools
import random
import sqlite3
import threading
from pathlib import Path

SEED = 0
STATUSES = ("pending", "pending", "shipped", "delivered")
FIRST = ("ana", "bruno", "clara", "dmitri", "elena", "farid", "greta", "hugo", "ines", "jonas")
LAST = ("silva", "berg", "walsh", "novak", "costa")
STREETS = ("Elm St", "Oak Ave", "Harbour Rd", "Mill Lane", "King St", "Park Row")
CITIES = ("Lisbon", "Oslo", "Dublin", "Vienna", "Porto")
PRODUCTS = ("kettle", "lamp", "backpack", "headphones", "teapot", "desk chair", "yoga mat", "blender")

SCHEMA = """\
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
    item TEXT NOT NULL, status TEXT NOT NULL, address TEXT NOT NULL);"""

_lock = threading.Lock()


def address(rng: random.Random) -> str:
    return f"{rng.randint(1, 99)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"


@functools.cache
def template(seed: int = SEED) -> sqlite3.Connection:
    """The seed database, in memory, built once per process (read only through `episode_database`)."""
    rng = random.Random(f"shop:{seed}")
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(SCHEMA)
    order_id = 1000
    for customer_id, (first, last) in enumerate(((f, l) for f in FIRST for l in LAST), start=1):
        name = f"{first.title()} {last.title()}"
        db.execute("INSERT INTO customers VALUES (?, ?, ?)", (customer_id, name, f"{first}.{last}@example.com"))
        home = address(rng)
        for _ in range(rng.randint(1, 3)):
            order_id += rng.randint(1, 7)
            db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                       (order_id, customer_id, rng.choice(PRODUCTS), rng.choice(STATUSES), home))
    db.commit()
    return db


def episode_database(folder: Path, seed: int = SEED) -> sqlite3.Connection:
    """A fresh copy of the seed database in `folder` (the episode's own file)."""
    db = sqlite3.connect(folder / "shop.sqlite", check_same_thread=False)
    with _lock:  # one backup at a time reads the shared in-memory template
        template(seed).backup(db)
    return db


def orders_digest(db: sqlite3.Connection) -> tuple[tuple, ...]:
    """The orders table as a comparable value: what the reward compares with the goal state."""
    return tuple(db.execute("SELECT id, customer_id, item, status, address FROM orders ORDER BY id"))
