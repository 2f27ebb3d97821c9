"""Run one untrusted SELECT against a database that must stay as it is.

The SQL comes from the model being trained, so every guard is independent of the others:

- the file is opened read-only (`file:...?mode=ro`): SQLite itself refuses to write it;
- an authorizer allows only reading (SELECT, READ, FUNCTION), so INSERT, UPDATE, DELETE, CREATE
  (temporary tables too), ATTACH, PRAGMA and transactions are refused while the statement is
  prepared, before anything runs; `load_extension` is refused by name (and extension loading is
  off, Python's default);
- a progress handler aborts a statement past its deadline (a cross join of cross joins runs for
  minutes), and strings and blobs are capped (`randomblob(1e9)` would allocate a gigabyte);
- at most `max_rows` rows are fetched; the result says whether there were more.

Refusals and failures are `QueryError`s whose message is what the model reads.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import PathNotFoundError, QueryError

MAX_SQL_CHARS = 4000
MAX_VALUE_BYTES = 100_000
"""the longest string or blob a query may build (SQLITE_LIMIT_LENGTH)"""
PROGRESS_EVERY = 1000
"""virtual-machine instructions between two looks at the clock"""

_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_DENIED_FUNCTIONS = {"load_extension"}


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool
    """more rows than `max_rows` matched; only the first ones are here"""

    def to_json(self) -> str:
        """The tool's answer text: `{"columns": [...], "rows": [[...], ...], "truncated": false}`."""
        rows = [[value.hex() if isinstance(value, bytes) else value for value in row] for row in self.rows]
        return json.dumps({"columns": list(self.columns), "rows": rows, "truncated": self.truncated})


def run_query(database: Path, sql: str, *, max_rows: int = 50, timeout_s: float = 2.0) -> QueryResult:
    """The first `max_rows` rows of `sql` on `database`, opened read-only; QueryError when the query
    is refused, fails, or runs past `timeout_s` seconds."""
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"query too long (over {MAX_SQL_CHARS} characters)")
    connection = _open_read_only(database, timeout_s)
    try:
        cursor = connection.execute(sql)
        rows = cursor.fetchmany(max_rows + 1)
        columns = tuple(column[0] for column in cursor.description or ())
    except sqlite3.DatabaseError as error:
        raise QueryError(_message(error, timeout_s)) from None
    except (sqlite3.ProgrammingError, sqlite3.Warning) as error:  # e.g. two statements in one
        raise QueryError(str(error)) from None
    finally:
        connection.close()
    return QueryResult(columns, tuple(rows[:max_rows]), len(rows) > max_rows)


def _open_read_only(database: Path, timeout_s: float) -> sqlite3.Connection:
    if not database.is_file():
        raise PathNotFoundError(f"no database at {database}")
    connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    connection.set_authorizer(_authorize)
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    deadline = time.monotonic() + timeout_s
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_EVERY)
    return connection


def _authorize(action: int, argument1: str | None, argument2: str | None, *_: str | None) -> int:
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (argument2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _message(error: sqlite3.DatabaseError, timeout_s: float) -> str:
    text = str(error)
    if text == "interrupted":
        return f"query stopped after {timeout_s:g} s"
    if "not authorized" in text or "authorization denied" in text:
        return "not authorized: only read-only SELECT queries may run"
    return text
