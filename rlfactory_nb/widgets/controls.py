"""Selectors every view builds the same way: the whole label shows, and a choice is always made.

ipywidgets cuts a description at a fixed width ("advantag...") unless told otherwise, and a Dropdown
whose options arrive after it was built stays empty until the user picks; `selector` and `set_options`
avoid both, so a view never opens on an empty plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

FULL_LABEL = {"description_width": "initial"}
"""style for any control with a description: the whole description shows"""


def selector(description: str, options: Sequence[Any] = ()) -> widgets.Dropdown:
    """A Dropdown with its whole label and its first option chosen."""
    dropdown = widgets.Dropdown(description=description, style=FULL_LABEL)
    set_options(dropdown, options)
    return dropdown


def set_options(dropdown: widgets.Dropdown, options: Sequence[Any]) -> None:
    """New options for `dropdown` (values or (label, value) pairs), keeping its choice when it is still
    offered, else choosing the first one.

    >>> choice = selector("reward", ["em", "f1"]); choice.value
    'em'
    >>> choice.value = "f1"; set_options(choice, ["f1", "shaped"]); choice.value
    'f1'
    >>> set_options(choice, [("sample 0", (0, 0))]); choice.value
    (0, 0)
    """
    values = [option[1] if isinstance(option, tuple) else option for option in options]
    current = dropdown.value
    dropdown.options = list(options)
    dropdown.value = current if current in values else (values[0] if values else None)
