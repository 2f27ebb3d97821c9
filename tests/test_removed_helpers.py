"""Helpers nothing called are gone (issue 40), and stay gone."""

import pytest

from rlfactory_nb import storage
from rlfactory_nb.chat.parsers import ParseResult
from rlfactory_nb.models.presets import tokenizer


@pytest.mark.parametrize(("owner", "name"), [(storage, "is_local"), (ParseResult, "has_calls"), (tokenizer, "save_tokenizer")])
def test_dead_helper_is_removed(owner, name):
    assert not hasattr(owner, name)
