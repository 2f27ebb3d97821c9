"""The generated datasets of the package's recipes, registered as `synthetic:NAME` (and `-heldout`).

data/rows.py reads datasets and knows no recipe: it imports this module by name the first time a
`synthetic:` source is asked for, and each recipe's generator is registered here.
"""

from __future__ import annotations

from rlfactory_nb.data.rows import register_synthetic
from rlfactory_nb.models.presets import calculator
from rlfactory_nb.recipes.gsm8k import synthetic as gsm8k
from rlfactory_nb.recipes.nl2sql import data as nl2sql

register_synthetic("calculator", calculator.dataset)
register_synthetic("nl2sql", nl2sql.dataset)
register_synthetic("gsm8k", gsm8k.dataset)
