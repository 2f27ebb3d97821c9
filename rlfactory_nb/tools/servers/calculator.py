"""Calculator MCP server: arithmetic through a safe AST evaluator, never `eval`.

The expression comes from a model being trained, so it is hostile input. It is parsed with `ast` and
only a whitelist is evaluated: numbers, + - * / // % **, unary + and -, parentheses, and a few math
functions and constants. Names, attributes, subscripts, comprehensions and any other call are
refused, and results are bounded so `10**10**10` fails fast instead of eating the machine.

The tool's contract (the tiny default model is trained on it): tool `calculator`, one argument
`expression`; the result text is just the number ("84", integers without ".0"), an error is a short
message starting with "error:".

>>> evaluate("12*(3+4)")
'84'
>>> evaluate("10/4")
'2.5'
>>> evaluate("__import__('os').system('id')")
'error: only numbers, + - * / // % **, parentheses and sqrt, abs, round, min, max, floor, ceil, log, exp, pow, sin, cos, tan, pi, e are allowed'

Run it over stdio: `python -m rlfactory_nb.tools.servers.calculator`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 200
MAX_DIGITS = 1000
"""integers longer than this are refused (a result, or an operand about to be multiplied up)"""

Number = int | float


class CalculatorError(ValueError):
    """The message is what the model reads (after "error: ")."""


def _bounded_pow(base: Number, exponent: Number) -> Number:
    whole = isinstance(base, int) and isinstance(exponent, int)
    if whole and exponent > 0 and abs(base) > 1 and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise CalculatorError(f"result too large (over {MAX_DIGITS} digits)")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("result is not a real number")
    return result


def _divide(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


def _floor_divide(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("division by zero")
    return a // b


def _modulo(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("modulo by zero")
    return a % b


_BINARY: dict[type, Callable[[Any, Any], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _bounded_pow,
}
_UNARY: dict[type, Callable[[Any], Number]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise CalculatorError("square root of a negative number")
    return math.sqrt(x)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    # Rounding an integer to -n digits computes 10**n: round(7, -10**7) held the GIL for 9 s, and
    # the server answered no other call meanwhile (sync tools run in threads, big-int C code never
    # lets go). With ndigits bounded every operation here costs microseconds, so none can starve.
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_DIGITS:
        raise CalculatorError(f"round's digits must be an integer from -{MAX_DIGITS} to {MAX_DIGITS}")
    return round(x, ndigits)


def _log(x: Number, base: Number = math.e) -> Number:
    if x <= 0 or base <= 0 or base == 1:
        raise CalculatorError("logarithm of a non-positive number (or invalid base)")
    return math.log(x, base)


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": _sqrt,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": _log,
    "exp": math.exp,
    "pow": _bounded_pow,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
DESCRIPTION = "Evaluate an arithmetic expression such as 12*(3+4) and return the number."
_ALLOWED = (
    "only numbers, + - * / // % **, parentheses and " + ", ".join([*_FUNCTIONS, *_CONSTANTS]) + " are allowed"
)


def evaluate(expression: str) -> str:
    """The calculator tool's answer text for `expression` (never raises)."""
    try:
        return format_number(compute(expression))
    except CalculatorError as exc:
        return f"error: {exc}"


def compute(expression: str) -> Number:
    """The value of `expression`; raises CalculatorError with a short message otherwise."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long (over {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError("expression too complex")
    try:
        return _eval(tree.body)
    except (OverflowError, MemoryError):
        raise CalculatorError("result too large") from None
    except (ValueError, TypeError) as exc:
        raise CalculatorError(str(exc) or "invalid arguments") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check_size(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _check_size(_BINARY[type(node.op)](_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and node.args
    ):
        return _check_size(_FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args)))
    raise CalculatorError(_ALLOWED)


def _check_size(value: Number) -> Number:
    # bit_length is cheap; 3.33 bits per decimal digit
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise CalculatorError(f"result too large (over {MAX_DIGITS} digits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result too large")
    return value


def format_number(value: Number) -> str:
    """Integers (and integral floats) without ".0"; other floats in their shortest exact form."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value) if isinstance(value, int) else repr(value)


def build_server() -> MCPServer:
    server = MCPServer("calculator", log_level="WARNING")

    @server.tool(name="calculator", description=DESCRIPTION)
    def calculator(expression: str) -> CallToolResult:
        text = evaluate(expression)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], is_error=text.startswith("error:")
        )

    return server


if __name__ == "__main__":
    build_server().run("stdio")
