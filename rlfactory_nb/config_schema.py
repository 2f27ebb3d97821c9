"""Building config dataclasses from untrusted data: YAML text, nested dicts, papermill parameters.

Config files are downloaded and shared like models, so everything here treats them as input to
check, not code to trust. `load_yaml` is `yaml.safe_load` that refuses documents whose aliases
expand past `MAX_YAML_NODES` values (a 500-byte "billion laughs" file otherwise takes gigabytes).
`build` checks every value against its field's annotation and collects every problem, each with its
key path, into one `ConfigError`.

A field's range is part of its annotation, so it reads next to the field's docstring:

    lr: PositiveFloat = 3e-4
    top_p: Annotated[float, Range(gt=0, le=1)] = 1.0

Any callable in `Annotated[...]` is a check: given the (type-correct) value, it returns a problem
or None. Floats are always finite: NaN and infinity are refused whatever the range.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Literal, TypeVar

import yaml

from rlfactory_nb.errors import ConfigError

T = TypeVar("T")

MAX_YAML_NODES = 100_000
"""values a YAML document may hold once its aliases are expanded (real configs hold a few hundred)"""


@dataclass(frozen=True)
class Range:
    """Bounds of a number: `Range(gt=0, le=1)` is (0, 1]; None leaves that side open.

    >>> Range(ge=0, lt=1)(1.5)
    'must be >= 0 and < 1, got 1.5'
    >>> Range(gt=0)(3) is None
    True
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def __call__(self, value: float | None) -> str | None:
        if value is None or self._contains(value):
            return None
        return f"must be {self}, got {value!r}"

    def _contains(self, value: float) -> bool:
        return not (
            (self.gt is not None and value <= self.gt)
            or (self.ge is not None and value < self.ge)
            or (self.lt is not None and value >= self.lt)
            or (self.le is not None and value > self.le)
        )

    def __str__(self) -> str:
        bounds = ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
        return " and ".join(f"{sign} {limit}" for sign, limit in bounds if limit is not None)


def not_empty(value: str | None) -> str | None:
    return "must not be empty" if value is not None and not value.strip() else None


def folder_name(value: str) -> str | None:
    """One folder name, so that the folder stays inside its parent: no separator, no "." or "..".

    >>> folder_name("calculator-run-2") is None, folder_name("../../etc") is None
    (True, False)
    """
    one_part = PurePosixPath(value).name == value and PureWindowsPath(value).name == value
    if one_part and value.strip() and value not in (".", "..") and "\0" not in value:
        return None
    return f"must be one folder name (no path separator, not '.' or '..'), got {value!r}"


def import_spec(value: str | None) -> str | None:
    """A Python object named by `package.module:name` or `path/to/file.py:name`: checked for its
    shape here, resolved before a run does any work (`rlfactory_nb.runtime.check_names`, which finds
    every field annotated `ImportSpec`).

    >>> import_spec("my_rewards.py:score") is None, import_spec("score")
    (True, "must look like 'package.module:name' or 'path/to/file.py:name', got 'score'")
    """
    if value is None:
        return None
    where, colon, name = value.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if colon and where.strip() and name.strip():
        return None
    return f"must look like 'package.module:name' or 'path/to/file.py:name', got {value!r}"


PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
NonEmptyStr = Annotated[str, not_empty]
ImportSpec = Annotated[str, import_spec]


def load_yaml(text: str, source: str = "") -> Any:
    """`yaml.safe_load`, except that a document expanding past MAX_YAML_NODES values, a recursive
    alias, or text YAML cannot read is a ConfigError naming `source`."""
    try:
        loader = yaml.SafeLoader(text)  # reads the first characters: a NUL byte raises here
    except yaml.YAMLError as error:
        raise ConfigError([f"cannot parse: {error}"], source) from error
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, set()) > MAX_YAML_NODES:
            problem = (
                f"its aliases (&/*) expand to over {MAX_YAML_NODES:,} values, or an alias contains itself"
            )
            raise ConfigError([problem], source)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(["the YAML is nested too deeply"], source) from None
    except ConfigError:
        raise
    except (yaml.YAMLError, ValueError) as error:  # ValueError: e.g. an integer of over 4,300 digits
        raise ConfigError([f"cannot parse: {error}"], source) from error
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Values under `node` with every alias expanded; each shared node is counted once per use but
    measured once, so this is linear in the document however large the expansion."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:  # an alias inside its own anchor: an infinite expansion
        return MAX_YAML_NODES + 1
    open_nodes.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    size = 1
    for child in children:
        size += _expanded_size(child, sizes, open_nodes)
        if size > MAX_YAML_NODES:
            break  # no need to add further: the caller refuses it
    open_nodes.discard(key)
    sizes[key] = size
    return size


def build(cls: type[T], data: Mapping[str, Any], source: str = "") -> T:
    """Instantiate dataclass `cls` from `data`, collecting every problem into one ConfigError."""
    problems: list[str] = []
    value = _build_dataclass(cls, data, "", problems)
    if problems:
        raise ConfigError(problems, source)
    return value


def _build_dataclass(cls: type, data: Any, path: str, problems: list[str]) -> Any:
    if not isinstance(data, Mapping):
        problems.append(f"{path or 'config'}: expected a mapping of {cls.__name__} fields, got {data!r}")
        return None
    known = len(problems)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = (
                f"; did you mean '{_join(path, close[0])}'?"
                if close
                else f"; valid keys: {', '.join(fields)}"
            )
            problems.append(f"{_join(path, str(key))}: unknown key{hint}")
    kwargs = {}
    for name, f in fields.items():
        key_path = _join(path, name)
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], key_path, problems)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"{key_path}: required field is missing")
    try:
        value = cls(**kwargs)
    except TypeError:  # a missing required field, already reported
        return None
    # Rules across fields (`field_problems`) run on well-typed values only.
    if len(problems) == known and hasattr(value, "field_problems"):
        problems.extend(f"{_join(path, name)}: {problem}" for name, problem in value.field_problems())
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _coerce(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    """Check `value` against the type `hint`; numbers written as strings ("1e-6") are accepted."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build_dataclass(hint, value, path, problems)
    if origin is Annotated:
        return _coerce_checked(hint, value, path, problems)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(hint, value, path, problems)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            suggestion = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{path}: {value!r} is not one of {', '.join(map(repr, choices))}{suggestion}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            problems.append(f"{path}: expected a list, got {value!r}")
            return value
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return [_coerce(item, v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected a mapping, got {value!r}")
        return dict(value) if isinstance(value, Mapping) else value
    return _coerce_scalar(hint, value, path, problems)


def _coerce_checked(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    """An `Annotated[type, check, ...]` field: the type first, then each check on a well-typed value."""
    base, *checks = typing.get_args(hint)
    known = len(problems)
    value = _coerce(base, value, path, problems)
    if len(problems) == known:
        problems.extend(f"{path}: {problem}" for check in checks if (problem := check(value)))
    return value


def _coerce_union(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    options = typing.get_args(hint)
    if value is None and type(None) in options:
        return None
    others = [o for o in options if o is not type(None)]
    if len(others) == 1:  # `X | None`: report X's own problem (a range, say), not just "expected X or null"
        return _coerce(others[0], value, path, problems)
    for option in others:
        attempt: list[str] = []
        result = _coerce(option, value, path, attempt)
        if not attempt:
            return result
    problems.append(f"{path}: expected {_type_name(hint)}, got {value!r}")
    return value


def _coerce_scalar(hint: Any, value: Any, path: str, problems: list[str]) -> Any:
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        number = _as_float(value)
        if number is not None:
            if not math.isfinite(number):
                problems.append(f"{path}: must be a finite number, got {value!r}")
            return number
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(value, hint):
        return value
    problems.append(f"{path}: expected {_type_name(hint)}, got {type(value).__name__} {value!r}")
    return value


def _as_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int beyond float range
            return math.inf
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        return _type_name(typing.get_args(hint)[0])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))
