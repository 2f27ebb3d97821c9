"""A chat template from a model folder cannot make one huge value while it renders.

transformers renders chat templates in Jinja's sandbox, which stops attribute tricks and caps
`range()` at 100,000 items, but not `{{ 'x' * 1500000000 }}`: that rendered for 38 s into a
MemoryError. The template ships with a model folder, so it is untrusted like the folder's code
(`model.trust_remote_code`). `install()` swaps transformers' sandbox class for one whose `*`, `**`
and `%` refuse a result past MAX_VALUE_CHARS (or an exponent past MAX_EXPONENT) with a TemplateBoundError
before computing it. Templates are compiled once per text (transformers caches them), so this costs
nothing per render. Time is not bounded: nested 100,000-item loops still run long (docs/security.md).
"""

from __future__ import annotations

import operator
import re
from typing import Any

from rlfactory_nb.errors import TemplateBoundError

MAX_VALUE_CHARS = 1_000_000
"""the longest string or list one `*` or `%` of a template may make (a real template's are < 1 KB)"""
MAX_EXPONENT = 64
_WIDTH = re.compile(r"%[-+ #0]*(\*|\d+)")


def checked_binop(op: str, left: Any, right: Any) -> Any:
    """`left op right`, refused when the result would be huge.

    >>> checked_binop("*", "ab", 3)
    'ababab'
    >>> checked_binop("*", "x", 1_500_000_000)
    Traceback (most recent call last):
    ...
    rlfactory_nb.errors.TemplateBoundError: a chat template asked for a value of 1500000000 items (str * 1500000000); the bound is 1000000
    """
    if op == "*":
        for sized, count in ((left, right), (right, left)):
            if isinstance(sized, (str, bytes, list, tuple)) and isinstance(count, int):
                _check_size(len(sized) * max(count, 0), f"{type(sized).__name__} * {count}")
        return operator.mul(left, right)
    if op == "**":
        if isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT and abs(left) > 1:
            raise TemplateBoundError(f"a chat template asked for a power {left!r} ** {right!r}; exponents are bounded at {MAX_EXPONENT}")
        return operator.pow(left, right)
    if isinstance(left, str):  # op == "%": a width field ('%1500000000s', '%*s') makes a long string
        for width in _WIDTH.findall(left):
            _check_size(MAX_VALUE_CHARS + 1 if width == "*" else int(width), f"a {width!r} width in str % ...")
    return operator.mod(left, right)


def _check_size(items: int, what: str) -> None:
    if items > MAX_VALUE_CHARS:
        raise TemplateBoundError(f"a chat template asked for a value of {items} items ({what}); the bound is {MAX_VALUE_CHARS}")


def install() -> None:
    """Make transformers compile chat templates in the bounded sandbox (idempotent)."""
    from transformers.utils import chat_template_utils

    sandbox = getattr(chat_template_utils, "ImmutableSandboxedEnvironment", None)
    if sandbox is None or getattr(sandbox, "bounded_by_rlfactory_nb", False):
        return

    class BoundedSandbox(sandbox):  # type: ignore[misc, valid-type]
        bounded_by_rlfactory_nb = True
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
            return checked_binop(operator_name, left, right)

    chat_template_utils.ImmutableSandboxedEnvironment = BoundedSandbox
    chat_template_utils._compile_jinja_template.cache_clear()
