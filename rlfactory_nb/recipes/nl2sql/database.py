"""The NL2SQL example's database: a small shop (customers, products, orders) built from a seed.

It is generated, never shipped: a binary in the repository could not be reviewed, and a seed gives
every machine (a notebook kernel, a Ray worker, the tool server's process) the same bytes. The file
is built on first use into the package cache (`$RLFACTORY_NB_CACHE`, else `~/.cache/rlfactory_nb`),
named after the seed and SCHEMA_VERSION, and written to a temporary name then renamed, so processes
racing to build it each see a whole database.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from pathlib import Path

from rlfactory_nb.node_cache import package_cache

SCHEMA_VERSION = 1
"""bump when the schema or the generator changes: the cached file name carries it"""
DEFAULT_SEED = 0

SCHEMA = """\
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, signup_year INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL, order_date TEXT NOT NULL);"""
"""the tables, as the model is shown them in its system prompt"""

CITIES = ("Lisbon", "Oslo", "Dublin", "Vienna", "Porto", "Krakow")
YEARS = tuple(range(2019, 2025))
PRODUCTS = {
    "books": ("Atlas", "Cookbook", "Diary", "Novel", "Poems", "Thesaurus"),
    "garden": ("Hose", "Rake", "Shovel", "Seeds", "Trowel", "Watering can"),
    "kitchen": ("Kettle", "Ladle", "Mixer", "Pan", "Teapot", "Whisk"),
    "toys": ("Ball", "Blocks", "Kite", "Puzzle", "Robot", "Yo-yo"),
}
CUSTOMERS = tuple(
    f"{first} {last}"
    for first in ("Ana", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo")
    for last in ("Silva", "Berg", "Walsh", "Novak", "Costa")
)
NUM_ORDERS = 300


def cache_dir() -> Path:
    """The package cache (`rlfactory_nb.node_cache.package_cache`, light to import: the tool server
    starts without transformers)."""
    return package_cache()


def database_path(seed: int = DEFAULT_SEED) -> Path:
    """Where the database of `seed` lives in the cache (it may not exist yet)."""
    return cache_dir() / "nl2sql" / f"shop-seed{seed}-v{SCHEMA_VERSION}.sqlite"


def ensure_database(seed: int = DEFAULT_SEED) -> Path:
    """The database of `seed`, built first when the cache does not have it."""
    path = database_path(seed)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".building")
        os.close(handle)
        try:
            build_database(Path(temporary), seed)
            os.replace(temporary, path)
        finally:
            Path(temporary).unlink(missing_ok=True)
    return path


def build_database(path: Path, seed: int) -> None:
    """Write the shop of `seed` into `path` (an empty or absent file)."""
    rng = random.Random(f"nl2sql:{seed}")
    customers = [
        (i, name, rng.choice(CITIES), rng.choice(YEARS)) for i, name in enumerate(CUSTOMERS, start=1)
    ]
    products = [
        (i, name, category, round(rng.uniform(2, 80), 2))
        for i, (category, name) in enumerate(
            ((category, name) for category, items in PRODUCTS.items() for name in items), start=1
        )
    ]
    orders = [
        (i, rng.randint(1, len(customers)), rng.randint(1, len(products)), rng.randint(1, 5), _date(rng))
        for i in range(1, NUM_ORDERS + 1)
    ]
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA)
        connection.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", customers)
        connection.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", products)
        connection.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", orders)
    connection.close()


def _date(rng: random.Random) -> str:
    return f"{rng.choice(YEARS)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
