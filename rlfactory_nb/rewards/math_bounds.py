"""How much work a math answer may ask of sympy, checked in microseconds before a worker sees it.

sympy evaluates numbers as it parses them: `\\boxed{9^{9^{9^{9}}}}` becomes `9**(9**387420489)`, a
power no machine finishes, and math-verify's comparison expands powers of sums, so
`(x+y+z+1)^{30}` runs past any timeout too. `math_verify` runs each check in a worker process killed
at its timeout, but the killed check held its worker for the whole timeout, and a new worker takes
seconds to import sympy. Twelve such answers ahead of one correct answer in a batch used the reward
runner's whole 30 s with math-verify's two workers, and the correct answer scored 0 on the timeout
(issue 50). A policy writes such answers by itself during RL.

So `refusal(answer)` reads the answer's numbers, powers and factorials (LaTeX or plain) and bounds
what evaluating them would cost; an answer past a bound is refused as unverifiable, with the reason
(`math_verify` scores it 0 and counts it in `refused`), and no worker ever sees it:

- more than `MAX_ANSWER_CHARS` characters, a number written with more than `MAX_LITERAL_DIGITS`
  digits, or brackets and powers nested past `MAX_NESTING`;
- a power of numbers whose value would have more than `MAX_POWER_DIGITS` digits, or whose exponent
  is itself arithmetic and past `MAX_COMPUTED_EXPONENT`. Such an exponent is bounded from above (a
  sum or product of numbers is at most the product of their sizes, a tower is estimated from its
  top), so `9^{9^{9^{9}}}`, `10^{-10^{10}}`, `2^{3 \\cdot 10^{8}}` and `10^{10^{3}}` are refused and
  `2^{1000}`, `2^{2^{3}}` and `10^{10^{2}}` are not;
- a power with a symbol in its base whose numeric exponent passes `MAX_SYMBOLIC_EXPONENT`, or whose
  expansion would have more than `MAX_EXPANDED_TERMS` terms (`(x+1)^{100}` has 101, `(x+y+1)^{100}`
  5,151); a `\\sum` or `\\prod` up to a number past `MAX_SYMBOLIC_EXPONENT` is one such power;
- a factorial of a number above `MAX_FACTORIAL`.

A power with a symbol in its exponent (`2^{n}`, `e^{-x^2}`) stays unevaluated and is not bounded,
but the numbers inside it are. No textbook answer comes near these bounds.

>>> refusal(r"The answer is $\\boxed{\\frac{5}{12}}$."), refusal(r"\\boxed{2^{2^{3}} + e^{-x^2} + (x+1)^{100}}")
(None, None)
>>> refusal(r"\\boxed{9^{9^{9^{9}}}}")
'a power of numbers with about 10^9 digits (more than 1,000)'
>>> refusal(r"\\boxed{(x+y+z+1)^{30}}")
'a power with a symbol whose expansion has 5,456 terms (more than 1,000)'
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

MAX_ANSWER_CHARS = 50_000
"""longer answers are refused (a long chain of thought that kept its reasoning is well below)"""
MAX_LITERAL_DIGITS = 1_000
"""digits one number may be written with"""
MAX_POWER_DIGITS = 1_000
"""digits a power of numbers may have (`10^{9000}` is compared in milliseconds, but nobody's answer
has a thousand digits)"""
MAX_COMPUTED_EXPONENT = 500
"""the largest exponent of a power of numbers when the exponent is itself arithmetic: math-verify
compares a tower unevaluated, and `2^{2^{10}}` took 1.4 s, `2^{10^{3}}` 5 s, `10^{10^{3}}` over 20 s"""
MAX_SYMBOLIC_EXPONENT = 1_000
"""the largest number a power with a symbol in its base may be raised to"""
MAX_EXPANDED_TERMS = 1_000
"""terms the expansion of a power of a sum may have (`(x+1)^{1000}` took 8 s and more)"""
MAX_FACTORIAL = 10_000
"""the largest n whose n! is computed"""
MAX_NESTING = 100
"""brackets and powers nested deeper are refused (the reading is recursive)"""

_TOKEN = re.compile(r"\d+(?:\.\d*)?|\.\d+|\*\*|\\[A-Za-z]+|[A-Za-z]|[^\s\w]|_")
_OPEN = {"{": "}", "(": ")", "[": "]"}
_CLOSE = frozenset(_OPEN.values())
_SEPARATORS = frozenset({r"\cdot", r"\times", r"\div", r"\frac", r"\dfrac", r"\tfrac", r"\left", r"\right", r"\boxed"})
"""commands that join or group numbers: a number beside them stays a number"""
_LOG10_2 = math.log10(2)


class _Refused(Exception):
    """An answer past a bound; the message says which."""


class _Size(NamedTuple):
    """What is known of a part of the answer: an upper bound on log10 of its absolute value (None
    when a symbol is in it, so it stays unevaluated), its terms (a bracketed sum's), and whether it
    is one number as written."""

    log10: float | None
    terms: int = 1
    literal: bool = False


def refusal(answer: str) -> str | None:
    """Why `answer` is too costly to verify (module docstring), or None when it may be verified."""
    if len(answer) > MAX_ANSWER_CHARS:
        return f"{len(answer):,} characters (more than {MAX_ANSWER_CHARS:,})"
    try:
        _Reader(_TOKEN.findall(answer)).sequence()
    except _Refused as refused:
        return str(refused)
    return None


class _Reader:
    """A recursive reading of the answer's tokens that keeps the `_Size` of every part."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.at = 0
        self.depth = 0

    def sequence(self) -> _Size:
        """Factors up to the next closing bracket or the end, joined by any operator or word: at
        most the product of their sizes (a + b <= 2 max(a, b)); its terms are those `+` and `-` join."""
        log10: float | None = 0.0
        factors: list[_Size] = []
        terms, after_factor = 1, False
        while self.at < len(self.tokens) and self.tokens[self.at] not in _CLOSE:
            token = self.tokens[self.at]
            if token in _OPEN or _is_number(token) or _is_symbol(token):
                factors.append(self.factor())
                size = factors[-1].log10
                log10 = None if log10 is None or size is None else log10 + max(size, _LOG10_2)
                after_factor = True
                continue
            if token in ("+", "-") and after_factor:  # a leading sign starts no term
                terms, after_factor = terms + 1, False
            self.at += 1
        return factors[0] if len(factors) == 1 and terms == 1 else _Size(log10, terms)

    def factor(self) -> _Size:
        """A primary, then powers (right-associative: `9**9**9`) and factorials."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _Refused(f"brackets or powers nested more than {MAX_NESTING} deep")
        base = self.primary()
        while self.at < len(self.tokens) and self.tokens[self.at] in ("^", "**", "!"):
            operator = self.tokens[self.at]
            self.at += 1
            if operator == "!":
                base = _factorial(base)
                continue
            while self.at < len(self.tokens) and self.tokens[self.at] in ("-", "+"):
                self.at += 1
            base = _power(base, self.factor() if self.at < len(self.tokens) else _Size(None))
        self.depth -= 1
        return base

    def primary(self) -> _Size:
        token = self.tokens[self.at]
        self.at += 1
        if _is_number(token):
            return _Size(_number(token), literal=True)
        if token in _OPEN:
            inner = self.sequence()
            if self.at < len(self.tokens):  # the closing bracket, whichever (an interval's `(1, 3]`)
                self.at += 1
            return inner
        return _Size(None)


def _is_number(token: str) -> bool:
    return token[0].isdigit() or (token[0] == "." and len(token) > 1)


def _is_symbol(token: str) -> bool:
    return (token.isalpha() and len(token) == 1) or (token.startswith("\\") and token not in _SEPARATORS)


def _number(token: str) -> float:
    digits = len(token.replace(".", ""))
    if digits > MAX_LITERAL_DIGITS:
        raise _Refused(f"a number of {digits:,} digits (more than {MAX_LITERAL_DIGITS:,})")
    if "." in token:
        return float(digits)  # 1/0.001 is as large as 1000: the digit count bounds both ways
    return math.log10(int(token)) if int(token) > 1 else 0.0


def _power(base: _Size, exponent: _Size) -> _Size:
    """The size of base^exponent; _Refused past the bounds (module docstring)."""
    if exponent.log10 is None:
        return _Size(None)
    if base.log10 is None:
        return _symbolic_power(base.terms, exponent.log10)
    if base.log10 == 0.0:  # 0 or 1 to any power
        return _Size(0.0)
    log_digits = exponent.log10 + math.log10(base.log10)  # log10(exponent * log10(base))
    if log_digits > math.log10(MAX_POWER_DIGITS):
        raise _Refused(f"a power of numbers with about 10^{log_digits:.0f} digits (more than {MAX_POWER_DIGITS:,})")
    if not exponent.literal and exponent.log10 > math.log10(MAX_COMPUTED_EXPONENT):
        raise _Refused(f"a power of numbers with a computed exponent up to {10**exponent.log10:,.0f} (more than {MAX_COMPUTED_EXPONENT})")
    return _Size(10**exponent.log10 * base.log10)


def _symbolic_power(terms: int, exponent_log10: float) -> _Size:
    if exponent_log10 > math.log10(MAX_SYMBOLIC_EXPONENT):
        raise _Refused(f"a power with a symbol raised to about 10^{exponent_log10:.0f} (more than {MAX_SYMBOLIC_EXPONENT:,})")
    expanded = math.comb(math.floor(10**exponent_log10 + 1e-9) + terms - 1, terms - 1)
    if expanded > MAX_EXPANDED_TERMS:
        raise _Refused(f"a power with a symbol whose expansion has {expanded:,} terms (more than {MAX_EXPANDED_TERMS:,})")
    return _Size(None)


def _factorial(value: _Size) -> _Size:
    if value.log10 is None:
        return value
    if value.log10 > math.log10(MAX_FACTORIAL):
        raise _Refused(f"a factorial of a number above {MAX_FACTORIAL:,}")
    n = 10**value.log10
    return _Size(n * math.log10(max(n, 2)))
