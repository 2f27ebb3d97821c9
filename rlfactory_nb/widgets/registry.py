"""The one dispatch from a plain object to its view: a registry keyed by type.

A widget module registers the view it provides: `@register_view(Trajectory)` above `TrajectoryView`
(a view is any callable `view(obj, **options)`). `view_for(obj)` walks the object's type and its
bases, so a subclass gets its parent's view unless it registers its own. Core objects reach this
through `rlfactory_nb._views.view_of` and never import a widget module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rlfactory_nb.errors import ArgumentTypeError

View = TypeVar("View", bound=Callable[..., Any])

_VIEWS: dict[type, Callable[..., Any]] = {}


def register_view(kind: type) -> Callable[[View], View]:
    """Register the decorated view for objects of type `kind` (and its subclasses)."""

    def register(view: View) -> View:
        _VIEWS[kind] = view
        return view

    return register


def view_for(obj: Any, **options: Any) -> Any:
    """The view registered for `obj`'s type (or the nearest base), built over `obj` with `options`."""
    for kind in type(obj).__mro__:
        if kind in _VIEWS:
            return _VIEWS[kind](obj, **options)
    known = ", ".join(sorted(kind.__name__ for kind in _VIEWS))
    raise ArgumentTypeError(f"no view is registered for {type(obj).__name__}; views exist for: {known}")
