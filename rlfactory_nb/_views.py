"""How a plain object's `.view()` reaches its notebook view without the core importing widgets.

Views live in `rlfactory_nb.widgets`; each widget module registers the view it provides for a type
(`@register_view(Trajectory)`), and `rlfactory_nb.widgets.view_for(obj)` is the one dispatch. A core
method calls `view_of(self, ...)`, which loads the widgets package by name when a view is asked for.
So no core module imports a widget module (the import cycle types -> widgets/trajectory ->
rollout/display -> types is gone, and scripts never load ipywidgets), and a new view is one widget
module plus its registration.
"""

from __future__ import annotations

import importlib
from typing import Any

WIDGETS = "rlfactory_nb.widgets"


def view_of(obj: Any, **options: Any) -> Any:
    """The notebook view registered for `obj`'s type, built with `options`."""
    return importlib.import_module(WIDGETS).view_for(obj, **options)
