"""Fixtures shared across the suite: the embedded tiny model, built once per cache folder."""

import pytest


@pytest.fixture(scope="session")
def tiny_policy():
    """The tiny-calculator preset (built on first use, ~3 min on 2 cores, then cached)."""
    from rlfactory_nb.policy import Policy

    return Policy.load("tiny-calculator")
