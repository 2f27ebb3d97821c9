"""The NL2SQL example: the generated database, the read-only `sql` tool over real MCP (hostile SQL
refused or stopped, the file's bytes unchanged), the questions and their split, the execution
reward on hand-made answers, and a CPU training run of examples/nl2sql/config.yaml."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfactory_nb.examples import example
from rlfactory_nb.recipes.nl2sql import data, database
from rlfactory_nb.recipes.nl2sql.query import QueryError, run_query
from rlfactory_nb.recipes.nl2sql.reward import LocalSql, execution_match, final_sql, same_result, sql_reward
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.types import ToolResult

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nl2sql"


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    """The database is built into a private cache, as a first run on a new machine builds it."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("cache")
        patch.setenv("RLFACTORY_NB_CACHE", str(folder))
        yield folder


@pytest.fixture
def shop(tmp_path):
    """A copy of the example's database that a test may attack."""
    return Path(shutil.copy(database.ensure_database(), tmp_path / "shop.sqlite"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------- the database


def test_database_is_built_once_from_the_seed_into_the_cache(cache, tmp_path):
    from rlfactory_nb.models.presets import cache_dir

    path = database.ensure_database()
    assert database.cache_dir() == cache_dir() == cache and path.parent == cache / "nl2sql"
    database.build_database(tmp_path / "again.sqlite", database.DEFAULT_SEED)
    database.build_database(tmp_path / "other.sqlite", database.DEFAULT_SEED + 1)
    assert digest(tmp_path / "again.sqlite") == digest(path) != digest(tmp_path / "other.sqlite")
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind
    counts = run_query(path, "SELECT (SELECT COUNT(*) FROM customers), (SELECT COUNT(*) FROM orders)")
    assert counts.rows == ((len(database.CUSTOMERS), database.NUM_ORDERS),)


# ---------------------------------------------------------------------- the read-only tool

HOSTILE = {
    "delete": ("DELETE FROM orders", "not authorized"),
    "update": ("UPDATE products SET price = 0", "not authorized"),
    "create": ("CREATE TABLE t (x)", "not authorized"),
    "temp table": ("CREATE TEMP TABLE t AS SELECT * FROM orders", "not authorized"),
    "drop after select": ("SELECT 1; DROP TABLE orders", "one statement at a time"),
    "attach": ("ATTACH DATABASE '/tmp/elsewhere.sqlite' AS other", "not authorized"),
    "load extension": ("SELECT load_extension('/tmp/evil.so')", "not authorized"),
    "pragma write": ("PRAGMA journal_mode = WAL", "not authorized"),
    "pragma read": ("PRAGMA table_info(orders)", "not authorized"),
    "vacuum into": ("VACUUM INTO '/tmp/copy.sqlite'", "not authorized"),
    "transaction": ("BEGIN IMMEDIATE", "not authorized"),
    "recursive": ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT COUNT(*) FROM n", "not authorized"),
    "huge blob": ("SELECT randomblob(1000000000)", "too big"),
    "minutes long": ("SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e", "stopped after 1 s"),
}  # fmt: skip


async def test_the_sql_server_answers_selects_and_refuses_or_stops_the_rest(shop, tmp_path):
    before = digest(shop)
    server = {
        "name": "nl2sql",
        "command": sys.executable,
        "args": ["-m", "rlfactory_nb.recipes.nl2sql.server", "--database", str(shop), "--max-rows", "5", "--timeout-s", "1"],
        "tools": {"sql": {"timeout_s": 20}},
    }  # fmt: skip
    async with ToolSet.from_config({"servers": [server]}) as tools:
        counted = await tools.call(
            "sql", {"query": "SELECT city, COUNT(*) FROM customers GROUP BY city ORDER BY city"}
        )
        assert counted.ok and json.loads(counted.content)["columns"] == ["city", "COUNT(*)"]
        cut = json.loads((await tools.call("sql", {"query": "SELECT id FROM orders ORDER BY id"})).content)
        assert cut == {"columns": ["id"], "rows": [[1], [2], [3], [4], [5]], "truncated": True}
        for name, (sql, message) in HOSTILE.items():
            started = time.monotonic()
            result = await tools.call("sql", {"query": sql})
            assert result.status == "error" and result.content.startswith("error:"), name
            assert message in result.content, (name, result.content)
            assert time.monotonic() - started < 10, name
    assert digest(shop) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shop.sqlite"]  # no journal, copy or WAL


def test_a_missing_database_is_an_error_not_a_new_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        run_query(tmp_path / "absent.sqlite", "SELECT 1")
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(QueryError, match="too long"):
        run_query(database.ensure_database(), "SELECT 1 " + " " * 5000)


async def test_the_example_s_tools_serve_its_database_from_any_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    async with example("nl2sql").tools() as tools:
        result = await tools.call("sql", {"query": "SELECT COUNT(*) FROM products"})
    assert result.ok and json.loads(result.content)["rows"] == [[24]]


# ---------------------------------------------------------------------- questions


def test_questions_split_disjointly_and_their_gold_results_are_the_gold_sql_s():
    train, heldout = data.dataset("train"), data.dataset("heldout")
    assert len(train) >= 100 and len(heldout) >= 25
    asked = [{row["messages"][-1]["content"] for row in rows} for rows in (train, heldout)]
    assert not asked[0] & asked[1]
    assert len({row["extra_info"]["template"] for row in heldout}) >= 8
    assert data.dataset("train", 5, seed=1) != data.dataset("train", 5) == data.dataset("train", 5)
    for row in train[:20]:
        gold = row["ground_truth"]
        assert row["messages"][0] == {"role": "system", "content": data.SYSTEM_PROMPT}
        assert [list(r) for r in run_query(database.ensure_database(), gold["sql"]).rows] == gold["rows"]
        assert gold["rows"] and gold["ordered"] == ("ORDER BY" in gold["sql"])


def test_the_example_dataset_is_notebook_ready(monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    ex = example("nl2sql")
    rows = ex.dataset("train", 64)
    assert len(rows) == 64 and rows[0]["ground_truth"]["rows"]
    assert len(ex.dataset("eval", 16)) == 16 and ex.config().data.eval == "synthetic:nl2sql-heldout"


# ---------------------------------------------------------------------- the reward


def gold_of(template: int) -> dict:
    """The ground truth of the first question made from TEMPLATES[template]."""
    return next(q for q in data.questions(database.ensure_database()) if q.template == template).row()[
        "ground_truth"
    ]


async def score(answer: str, gold: dict) -> dict[str, float]:
    return await execution_match(make_sample(answer, ground_truth=gold))


async def test_execution_match_compares_result_sets_in_order_only_when_asked():
    by_price, names, average = gold_of(2), gold_of(1), gold_of(3)
    assert by_price["ordered"] and len(by_price["rows"]) > 1 and not names["ordered"]
    cases = [
        (f"<answer>{by_price['sql']}</answer>", by_price, 1.0),
        (f"<answer>{by_price['sql'].replace('price DESC', 'price ASC')}</answer>", by_price, 0.0),
        (f"<answer>{names['sql']} ORDER BY name DESC</answer>", names, 1.0),  # any order will do
        (f"<answer>```sql\n{names['sql']};\n```</answer>", names, 1.0),
        (f"<answer>{names['sql'].replace('SELECT name', 'SELECT name, price')}</answer>", names, 0.0),
        (f"<answer>{names['sql']} LIMIT 1</answer>", names, 0.0),
        # the same average computed another way: floats compared to 4 decimals
        (
            f"<answer>{average['sql'].replace('AVG(price)', 'SUM(price) * 1.0 / COUNT(*)')}</answer>",
            average,
            1.0,
        ),
    ]
    for answer, gold, expected in cases:
        assert await score(answer, gold) == {"score": expected, "ran": 1.0}, answer


async def test_failed_cut_or_missing_queries_score_zero():
    names = gold_of(1)
    assert await score("<answer>SELECT nme FROM products</answer>", names) == {"score": 0.0, "ran": 0.0}
    assert await score("<answer>DELETE FROM products</answer>", names) == 0.0  # not a query: nothing runs
    assert await score("<answer>SELECT name FROM products</answer>", names) == {
        "score": 0.0,
        "ran": 1.0,
    }  # 24 rows, cut at 20
    assert final_sql(make_sample("The products are Hose and Rake.")) is None
    with pytest.raises(ValueError, match="ground truth must be a dict with 'rows'"):
        await score(f"<answer>{names['sql']}</answer>", names["rows"])


async def test_sql_reward_verifies_through_the_tools_it_is_given():
    calls = []

    class Recording(LocalSql):
        def call(self, name, arguments):
            calls.append((name, arguments))
            return super().call(name, arguments)

    reward = sql_reward(Recording())
    names = gold_of(1)
    assert await reward(make_sample(f"<answer>{names['sql']}</answer>", ground_truth=names)) == {
        "score": 1.0,
        "ran": 1.0,
    }
    assert await reward(make_sample("no query here", ground_truth=names)) == 0.0
    assert calls == [("sql", {"query": names["sql"]})] and reward.__name__ == "nl2sql_execution"
    cut = ToolResult("sql", "ok", '{"columns": ["id"], "rows": [[1], [2')  # cut at max_result_chars
    assert same_result(cut, make_sample("x", ground_truth=names)) == {"score": 0.0, "ran": 0.0}


# ---------------------------------------------------------------------- training on CPU


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random tiny Qwen3 with the preset tokenizer: the pipeline, without building the preset."""
    from tiny_models import random_qwen3, save_with_tokenizer

    return save_with_tokenizer(random_qwen3(max_positions=1024), tmp_path_factory.mktemp("tiny-qwen3"))


def test_train_command_runs_two_steps_of_the_example_on_cpu(tiny_model, tmp_path):
    """Two GRPO steps with the real sql server, an eval and a checkpoint, in a subprocess: about
    30 s on 2 busy CPU cores, so not marked slow."""
    command = [
        str(Path(sys.executable).with_name("rlfactory-nb")),
        "train",
        str(EXAMPLE / "config.yaml"),
        "grpo.steps=2",
        "grpo.prompts_per_step=2",
        "grpo.group_size=2",
        "grpo.eval_every=2",
        "grpo.checkpoint_every=2",
        "data.eval_size=2",
        "rollout.max_turns=2",
        f"model.name={tiny_model}",
        f"output_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished step 2 of 2" in done.stdout
    run = tmp_path / "nl2sql-tiny"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert {"reward/mean", "reward/nl2sql_execution", "eval/sampled_reward/mean"} <= set(rows[-1]), sorted(
        rows[-1]
    )
    assert rows[-1]["reward/mean"] == 0.0  # random weights write no SQL; the scoring path still ran
    assert (run / "checkpoints" / "step_000002").is_dir()
    trajectories = [
        json.loads(line)
        for path in (run / "trajectories").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len(trajectories) == 8
    assert trajectories[0]["messages"][0] == {"role": "system", "content": data.SYSTEM_PROMPT}
