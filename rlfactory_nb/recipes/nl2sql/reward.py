"""The NL2SQL reward: run the model's final SQL with the `sql` tool and compare its result set with
the gold one (execution accuracy, as Spider and BIRD score it).

The final query is the `<answer>` of the last turn (a ```sql fence inside is allowed); an answer
that is not a SELECT (or WITH) query scores 0 without running anything. Results are compared as
rows of values, column names ignored: as multisets unless the question asks for an order
(`ground_truth["ordered"]`), and floats to 4 decimals, so `SUM(q * p)` and `SUM(p * q)` agree. A
result cut at the tool's row limit never matches, nor does a failed or refused query.

The query goes through `tool_verified`, so it meets the guards the rollout's tool has. A config's
reward has no ToolSet, so `execution_match` runs the same tool code in-process (`LocalSql`); from a
notebook, `sql_reward(toolset)` verifies through the run's own tools.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlfactory_nb.errors import SampleError
from rlfactory_nb.recipes.nl2sql.database import ensure_database
from rlfactory_nb.recipes.nl2sql.server import TOOL_NAME, answer
from rlfactory_nb.rewards.values import RewardReturn
from rlfactory_nb.rewards.verify import CallsTools, tool_verified
from rlfactory_nb.types import Sample, ToolResult

FLOAT_DECIMALS = 4
_FENCE = re.compile(r"^```(?:sql)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)
_QUERY_START = re.compile(r"^(SELECT|WITH)\b", re.IGNORECASE)


def final_sql(sample: Sample) -> str | None:
    """The query in the final answer, or None when the answer is not one.

    >>> from rlfactory_nb.rewards.samples import make_sample
    >>> final_sql(make_sample("<answer>```sql\\nSELECT 1;\\n```</answer>")), final_sql(make_sample("It is 42."))
    ('SELECT 1;', None)
    """
    text = sample.final_answer.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1) if fenced else text
    return text if _QUERY_START.match(text) else None


def _arguments(sample: Sample) -> dict[str, Any] | None:
    query = final_sql(sample)
    return None if query is None else {"query": query}


def same_result(result: ToolResult, sample: Sample) -> dict[str, float]:
    """`score` 1.0 when the tool's rows equal the gold rows (see the module docstring); `ran` 1.0
    when the query ran at all, a signal that the model writes valid SQL before it writes right SQL."""
    try:
        answered = json.loads(result.content) if result.ok else None
    except json.JSONDecodeError:  # cut at the tool's max_result_chars
        answered = None
    if not isinstance(answered, dict) or answered.get("truncated") is not False:
        return {"score": 0.0, "ran": float(answered is not None)}
    gold = sample.ground_truth
    if not isinstance(gold, dict) or "rows" not in gold:
        raise SampleError(f"sample {sample.id!r}: ground truth must be a dict with 'rows', got {gold!r:.80}")
    mine, theirs = _normalized(answered["rows"]), _normalized(gold["rows"])
    same = mine == theirs if gold.get("ordered") else Counter(mine) == Counter(theirs)
    return {"score": float(same), "ran": 1.0}


def _normalized(rows: list[list[Any]]) -> list[tuple[Any, ...]]:
    return [tuple(round(v, FLOAT_DECIMALS) if isinstance(v, float) else v for v in row) for row in rows]


def sql_reward(tools: CallsTools, tool_name: str = TOOL_NAME) -> Callable[[Sample], Awaitable[RewardReturn]]:
    """The execution reward, verified through `tools` (a started ToolSet holding the `sql` tool)."""
    return tool_verified(tools, tool_name, _arguments, same_result, name="nl2sql_execution")


class LocalSql:
    """The `sql` tool without a server: the code the MCP server runs, on the example's database
    (built on first call) or `database`, in this process."""

    def __init__(self, database: Path | None = None, *, max_rows: int = 20, timeout_s: float = 2.0) -> None:
        self.database, self.max_rows, self.timeout_s = database, max_rows, timeout_s

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name != TOOL_NAME:
            return ToolResult(name, "unknown_tool", f"error: no tool {name!r}; this is {TOOL_NAME!r}")
        self.database = self.database or ensure_database()
        done = answer(self.database, arguments["query"], max_rows=self.max_rows, timeout_s=self.timeout_s)
        return ToolResult(name, "error" if done.is_error else "ok", done.content[0].text)


execution_match = sql_reward(LocalSql())
"""the example config's reward: `rlfactory_nb.recipes.nl2sql.reward:execution_match`"""
