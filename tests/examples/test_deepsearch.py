"""The DeepSearch recipe: data layouts and conversion, EM on hand-made answers, the search tool over
the shipped corpus (real MCP over stdio), and a CPU training run of examples/deepsearch/config.yaml."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.rows import DatasetError, load_rows, require_prompts
from rlfactory_nb.recipes.deepsearch import (
    SYSTEM_PROMPT,
    Question,
    answer_exact_match,
    answer_format,
    read_questions,
    training_reward,
    write_questions,
)
from rlfactory_nb.recipes.deepsearch.convert import main as convert
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.search import BM25, load_corpus
from rlfactory_nb.types import MalformedCall, Turn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "deepsearch"
DATA = EXAMPLE / "data"
SPLITS = ("train", "eval")


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path, records):
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(records), path)
    return path


# ---------------------------------------------------------------------- shipped data


def test_shipped_corpus_and_questions_have_the_promised_shape():
    corpus = load_corpus(DATA / "corpus.jsonl")
    titles = {doc.title for doc in corpus}
    assert len(corpus) >= 60 and len(titles) == len(corpus)
    questions = [q for split in SPLITS for q in read_questions(DATA / f"{split}_questions.jsonl")]
    assert len(questions) >= 40
    assert sum(q.extra_info["hops"] > 1 for q in questions) >= 10
    for q in questions:
        assert set(q.extra_info["support"]) <= titles, q.question
        last_hop = next(doc for doc in corpus if doc.title == q.extra_info["support"][-1])
        assert any(a.lower() in f"{last_hop.title} {last_hop.text}".lower() for a in q.answers), q.question


@pytest.mark.parametrize("split", SPLITS)
def test_shipped_training_files_are_the_conversion_of_the_plain_questions(split, tmp_path):
    """train.jsonl / eval.jsonl must not drift from their sources or from the system prompt."""
    regenerated = tmp_path / f"{split}.jsonl"
    assert convert([str(DATA / f"{split}_questions.jsonl"), str(regenerated), "--layout", "verl"]) == 0
    assert regenerated.read_text() == (DATA / f"{split}.jsonl").read_text()


def test_training_rows_carry_the_system_prompt_and_the_gold_answers():
    rows = load_rows(str(DATA / "train.jsonl"))
    first = rows[0]
    assert first["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Who founded Calloway Harbor?"},
    ]
    assert first["ground_truth"] == {"target": ["Odo Fenwick"]}
    assert first["data_source"] == "deepsearch_synthetic" and first["extra_info"]["split"] == "train"


# ---------------------------------------------------------------------- layouts and conversion

QUESTIONS = [
    Question("Who founded Calloway Harbor?", ("Odo Fenwick",), "nq", {"split": "test", "index": 0}, "q0"),
    Question(
        "How high is Mount Caddor?", ("4,512 metres", "4512 m"), "hotpotqa", {"split": "test", "index": 1}
    ),
]


def test_parquet_in_the_verl_layout_round_trips_and_trains(tmp_path):
    path = write_questions(tmp_path / "test.parquet", QUESTIONS)
    assert read_questions(path) == QUESTIONS
    rows = load_rows(str(path))
    assert rows[1]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert rows[1]["messages"][1]["content"] == "How high is Mount Caddor?"
    assert rows[1]["ground_truth"] == {"target": ["4,512 metres", "4512 m"]}
    assert rows[1]["data_source"] == "hotpotqa"


def test_converter_round_trip_plain_to_parquet_to_plain(tmp_path):
    plain = write_questions(tmp_path / "plain.jsonl", QUESTIONS)
    assert json.loads(plain.read_text().splitlines()[0])["answers"] == ["Odo Fenwick"]
    assert convert([str(plain), str(tmp_path / "verl.parquet")]) == 0
    assert convert([str(tmp_path / "verl.parquet"), str(tmp_path / "back.jsonl")]) == 0
    assert (tmp_path / "back.jsonl").read_text() == plain.read_text()


def test_converter_filters_by_data_source_and_limit(tmp_path, capsys):
    source = write_questions(tmp_path / "all.parquet", QUESTIONS * 3)
    assert convert([str(source), str(tmp_path / "nq.jsonl"), "--only-source", "nq", "--limit", "2"]) == 0
    assert [q.data_source for q in read_questions(tmp_path / "nq.jsonl")] == ["nq", "nq"]
    assert "wrote 2 questions" in capsys.readouterr().out
    assert convert([str(source), str(tmp_path / "none.jsonl"), "--only-source", "popqa"]) == 2
    assert "no rows left" in capsys.readouterr().err


def test_a_search_r1_parquet_is_re_prompted_for_tool_calls(tmp_path):
    """Search-R1's rows put instructions and question in one user turn and ask for <search> tags."""
    instructions = (
        "Answer the given question. ... call a search engine by <search> query </search> ... Question: "
    )
    record = {
        "id": "test_7",
        "golden_answers": ["William Shakespeare", "Shakespeare"],
        "data_source": "nq",
        "prompt": [{"role": "user", "content": instructions + "who wrote hamlet?\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": ["William Shakespeare", "Shakespeare"]}},
        "extra_info": {"split": "test", "index": 7},
    }
    source = write_parquet(tmp_path / "search_r1.parquet", [record, {**record, "golden_answers": None}])
    with pytest.raises(DatasetError, match=r"search_r1.parquet row 2: column 'golden_answers'"):
        read_questions(source)
    source = write_parquet(tmp_path / "search_r1.parquet", [record])
    (question,) = read_questions(source)
    assert question == Question(
        "who wrote hamlet?",
        ("William Shakespeare", "Shakespeare"),
        "nq",
        {"split": "test", "index": 7},
        "test_7",
    )
    assert convert([str(source), str(tmp_path / "ours.parquet")]) == 0
    (row,) = load_rows(str(tmp_path / "ours.parquet"))
    assert row["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "who wrote hamlet?"},
    ]


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"question": "Who?"},
            r"bad.jsonl:1: missing column 'answers' \(plain layout\) or 'reward_model.ground_truth.target'",
        ),
        ({"answers": ["x"]}, r"bad.jsonl:1: missing column 'question' \(plain layout\) or 'prompt'"),
        ({"question": "Who?", "answers": []}, r"column 'answers' holds no answer"),
        (
            {
                "prompt": [{"role": "user", "content": "Who?"}],
                "reward_model": {"ground_truth": {"answer": "x"}},
            },
            r"column 'reward_model.ground_truth.target': ground_truth must be",
        ),
        ({"question": "Who?", "answers": ["x"], "extra_info": "note"}, r"'extra_info' must be an object"),
    ],
)
def test_missing_or_malformed_columns_name_the_column_and_the_file(tmp_path, record, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [record])
    with pytest.raises(DatasetError, match=message):
        read_questions(path)


def test_parquet_errors_name_the_row_and_training_points_plain_files_to_the_converter(tmp_path):
    path = write_parquet(
        tmp_path / "bad.parquet", [{"data_source": "nq", "prompt": [{"role": "user", "content": "Who?"}]}]
    )
    with pytest.raises(
        DatasetError,
        match=r"bad.parquet row 1: missing column 'answers'.*columns present: data_source, prompt",
    ):
        read_questions(path)
    # the rows load (an environment may own the reward), and a run whose reward reads the ground truth refuses them
    assert "ground_truth" not in load_rows(str(path))[0]
    runtime = Runtime.from_config(RunConfig(name="x").replace({"data.train": str(path)}))
    with pytest.raises(DatasetError, match=r"no 'ground_truth' column, which the run's reward reads.*exact_match"):
        _ = runtime.reward
    with pytest.raises(DatasetError, match=r"deepsearch.convert"):
        require_prompts(load_rows(str(DATA / "train_questions.jsonl")), "data.train")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="junk.parquet: not a readable parquet file"):
        read_questions(tmp_path / "junk.parquet")
    with pytest.raises(DatasetError, match="write a .jsonl or .parquet file"):
        write_questions(tmp_path / "out.csv", QUESTIONS)


# ---------------------------------------------------------------------- exact match


@pytest.mark.parametrize(
    "final_turn, golds, expected",
    [
        ("<answer>Odo Fenwick</answer>", ["Odo Fenwick"], 1.0),
        ("<answer>  odo   FENWICK </answer>", ["Odo Fenwick"], 1.0),  # case and whitespace
        ("<answer>The Gulls</answer>", ["Gulls"], 1.0),  # articles dropped on both sides
        ("<answer>Gulls</answer>", ["the Gulls"], 1.0),
        ("<answer>an Amber War.</answer>", ["Amber War"], 1.0),  # article and punctuation
        ("<answer>4,512</answer>", ["4512 m", "4,512"], 1.0),  # any of several gold answers
        ("<answer>Korr-Aldane</answer>", ["KorrAldane"], 1.0),  # punctuation removed, not spaced
        ("<answer>Odo</answer>", ["Odo Fenwick"], 0.0),  # a part is not a match
        ("<answer>Odo Fenwick of Drest</answer>", ["Odo Fenwick"], 0.0),
        ("Odo Fenwick", ["Odo Fenwick"], 0.0),  # no <answer> tags: no credit
        ("<answer>Nethby</answer> on second thought <answer>Odo Fenwick</answer>", ["Odo Fenwick"], 1.0),
        ("<think>It is <answer>Nethby</answer>?</think><answer>Valmont</answer>", ["Nethby"], 0.0),
    ],
)
def test_exact_match_of_the_answer_tags(final_turn, golds, expected):
    sample = make_sample(final_turn, ground_truth={"target": golds})
    assert answer_exact_match(sample) == expected


def test_only_the_final_turn_answer_counts_and_missing_ground_truth_is_an_error():
    searched = make_sample(
        "<answer>Odo Fenwick</answer><tool_call>...</tool_call>",
        "I could not find it.",
        ground_truth=["Odo Fenwick"],
    )
    assert answer_exact_match(searched) == 0.0
    with pytest.raises(ValueError, match="no ground truth"):
        answer_exact_match(make_sample("<answer>x</answer>"))
    with pytest.raises(ValueError, match="no ground truth"):
        answer_exact_match(make_sample("no tags"))


def test_training_reward_adds_a_small_format_term():
    gold = {"target": ["Nethby"]}
    assert training_reward(make_sample("<answer>Nethby</answer>", ground_truth=gold)) == {
        "score": 1.1,
        "em": 1.0,
        "format": 1.0,
    }
    assert training_reward(make_sample("<answer>Valmont</answer>", ground_truth=gold)) == {
        "score": 0.1,
        "em": 0.0,
        "format": 1.0,
    }
    assert training_reward(make_sample("Nethby", ground_truth=gold))["score"] == 0.0
    broken = make_sample(
        Turn("<tool_call>{bad", parse_errors=[MalformedCall("bad JSON")]),
        "<answer>Nethby</answer>",
        ground_truth=gold,
    )
    assert answer_format(broken) == 0.0 and answer_exact_match(broken) == 1.0
    assert answer_format(make_sample("<answer>a</answer><answer>b</answer>")) == 0.0


# ---------------------------------------------------------------------- the search tool


async def test_search_server_finds_each_shipped_question_s_first_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the tools file must not depend on the working folder
    questions = [q for split in SPLITS for q in read_questions(DATA / f"{split}_questions.jsonl")]
    async with ToolSet.from_config(EXAMPLE / "tools.yaml") as tools:
        for q in questions:
            result = await tools.call("search", {"query": q.question})
            assert result.ok and 1 <= result.content.count("Doc ") <= 3, result.content
            assert f'(Title: "{q.extra_info["support"][0]}")' in result.content, q.question
        wide = await tools.call("search", {"query": "Calloway Harbor", "top_k": 9})
        assert wide.content.count("Doc ") == 5  # capped by --max-top-k
        for line in wide.content.splitlines():
            assert len(line.partition(") ")[2]) <= 303  # --snippet-chars 300, plus "..."


class _RetrievalService(BaseHTTPRequestHandler):
    """A stand-in for Search-R1's /retrieve endpoint, backed by BM25 over the shipped corpus."""

    index = BM25(load_corpus(DATA / "corpus.jsonl"))
    requests: ClassVar[list] = []

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(request)
        if request["queries"] == ["fail"]:
            self.send_error(500)
            return
        results = [
            [
                {"document": {"id": doc.id, "contents": f'"{doc.title}"\n{doc.text}'}, "score": score}
                for doc, score in self.index.search(query, request["topk"])
            ]
            for query in request["queries"]
        ]
        body = json.dumps({"result": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


async def test_remote_search_forwards_to_a_search_r1_retrieval_service():
    service = ThreadingHTTPServer(("127.0.0.1", 0), _RetrievalService)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{service.server_address[1]}/retrieve"
    server = {
        "name": "search",
        "command": sys.executable,
        "args": ["-m", "rlfactory_nb.recipes.deepsearch.remote_search", "--url", url, "--top-k", "2"],
    }
    try:
        async with ToolSet.from_config({"servers": [server]}) as tools:
            result = await tools.call("search", {"query": "Who designed the Sorrel Viaduct?"})
            assert result.ok and result.content.startswith('Doc 1(Title: "Sorrel Viaduct") ')
            assert result.content.count("Doc ") == 2
            assert _RetrievalService.requests[-1] == {
                "queries": ["Who designed the Sorrel Viaduct?"],
                "topk": 2,
                "return_scores": True,
            }
            failed = await tools.call("search", {"query": "fail"})  # the service answers 500
            assert failed.status == "error" and "500" in failed.content
    finally:
        service.shutdown()


# ---------------------------------------------------------------------- training on CPU


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random tiny Qwen3 with the preset tokenizer: the pipeline, without building the preset."""
    from tiny_models import random_qwen3, save_with_tokenizer

    return save_with_tokenizer(random_qwen3(max_positions=1024), tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.mark.slow
def test_train_command_runs_the_example_on_cpu_and_writes_metrics(tiny_model, tmp_path):
    command = [
        str(Path(sys.executable).with_name("rlfactory-nb")),
        "train",
        str(EXAMPLE / "config.yaml"),
        "grpo.steps=1",
        "grpo.prompts_per_step=2",
        "grpo.group_size=2",
        "grpo.eval_every=1",
        "data.eval_size=2",
        "rollout.max_turns=2",
        f"model.name={tiny_model}",
        f"output_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished step 1 of 1" in done.stdout
    rows = [
        json.loads(line) for line in (tmp_path / "deepsearch-tiny" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [0, 1]
    step = rows[1]
    em, format_ok = "reward/deepsearch_training_reward/em", "reward/deepsearch_training_reward/format"
    assert {"reward/mean", em, format_ok, "eval/sampled_reward/mean"} <= set(step), sorted(step)
    assert step["reward/mean"] == pytest.approx(step[em] + 0.1 * step[format_ok])
    trajectories = [
        json.loads(line)
        for path in (tmp_path / "deepsearch-tiny" / "trajectories").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len(trajectories) == 4
    assert trajectories[0]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
