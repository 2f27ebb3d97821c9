"""Files users download and share (run configs, tools configs, trajectory files), and the sockets a
run opens (issue #19, items 12 to 14): a hostile or broken file is refused with an error that names
the file and the field, and nothing listens beyond the interface it was given."""

import ipaddress
import json
import subprocess
import sys
import textwrap
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch

from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.engines import weight_sync
from rlfactory_nb.tools.config import load_tools_config
from rlfactory_nb.types import Trajectory, load_jsonl, save_jsonl

ROOT = Path(__file__).resolve().parents[2]
WILDCARDS = {"0.0.0.0", "::"}


def billion_laughs(indent: str = "") -> str:
    """A "billion laughs" YAML body: nine levels of nine aliases each, 9**9 strings once expanded."""
    lines = [f"{indent}l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_run_config_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text("name: bomb\nmodel:\n  engine_args:\n" + billion_laughs("    "))
    assert path.stat().st_size < 600
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases") as error:
        RunConfig.from_yaml(path)
    assert time.perf_counter() - started < 2
    assert str(path) in str(error.value)


def test_a_billion_laughs_tools_config_is_refused_at_once(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("servers: []\nanchors:\n" + billion_laughs("  "))
    with pytest.raises(ConfigError, match="aliases"):
        load_tools_config(path)


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\nmodel:\n  engine_args: &loop\n    again: *loop\n")
    with pytest.raises(ConfigError, match="alias"):
        RunConfig.from_yaml(path)


@pytest.mark.parametrize(
    "setting, field",
    [
        ("grpo: {lr: .nan}", "grpo.lr"),
        ("grpo: {lr: -.inf}", "grpo.lr"),
        ("grpo: {steps: -5}", "grpo.steps"),
        ("grpo: {group_size: 0}", "grpo.group_size"),
        ("grpo: {clip_low: 1.5}", "grpo.clip_low"),
        ("grpo: {logprob_chunk_tokens: 0}", "grpo.logprob_chunk_tokens"),
        ("grpo: {max_tokens_per_micro_batch: -1}", "grpo.max_tokens_per_micro_batch"),
        ("rollout: {top_p: 7}", "rollout.top_p"),
        ("rollout: {temperature: -1}", "rollout.temperature"),
        ("model: {lora: {rank: 0}}", "model.lora.rank"),
        ("model: {lora: {dropout: 1.0}}", "model.lora.dropout"),
        ("cluster: {num_workers: 0}", "cluster.num_workers"),
        ("tools: {timeout_s: 0}", "tools.timeout_s"),
        ("reward: {function: ''}", "reward.function"),
    ],
)
def test_a_value_out_of_its_range_is_refused_naming_the_field(tmp_path, setting, field):
    path = tmp_path / "config.yaml"
    path.write_text(f"name: run\n{setting}\n")
    with pytest.raises(ConfigError) as error:
        RunConfig.from_yaml(path)
    assert f"{field}: must" in str(error.value)


def test_overrides_and_papermill_parameters_are_range_checked_too():
    with pytest.raises(ConfigError, match="grpo.lr: must be a finite number"):
        RunConfig.from_dict({"name": "run"}, ["grpo.lr=nan"])
    with pytest.raises(ConfigError, match="grpo.group_size: must be >= 1"):
        RunConfig.from_dict({"name": "run"}, {"grpo.group_size": 0})


@pytest.mark.parametrize("name", ["../../..", "..", ".", "a/b", "/etc", "a\\b", ""])
def test_the_run_name_cannot_leave_output_dir(name):
    with pytest.raises(ConfigError, match="name: must be one folder name"):
        RunConfig.from_dict({"name": name})


def test_every_number_and_text_field_of_the_run_config_declares_its_range():
    unchecked = [path for path, hint in _leaf_fields(RunConfig, "") if _is_number_or_text(hint) and not _checks(hint)]
    assert not unchecked, f"fields without a range or check in their annotation: {unchecked}"


def _leaf_fields(cls: type, prefix: str):
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        nested = next((a for a in [hint, *inner] if isinstance(a, type) and hasattr(a, "__dataclass_fields__")), None)
        if nested is not None:
            yield from _leaf_fields(nested, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", hint


def _without_none(hint):
    if typing.get_origin(hint) is typing.Union or type(hint).__name__ == "UnionType":
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def _is_number_or_text(hint) -> bool:
    hint = _without_none(hint)
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    return base in (int, float, str)


def _checks(hint) -> tuple:
    hint = _without_none(hint)
    return typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ()


def test_every_example_config_still_loads():
    for path in sorted(ROOT.glob("examples/*/config*.yaml")):
        RunConfig.from_yaml(path)


# Trajectory files ------------------------------------------------------------------------------


def test_a_broken_line_in_a_trajectory_file_names_the_file_and_the_line(tmp_path):
    path = save_jsonl([Trajectory(prompt_ids=[1, 2]), Trajectory(prompt_ids=[3])], tmp_path / "step.jsonl")
    with path.open("a") as out:
        out.write('{"prompt_ids": [1, 2\n')
    with pytest.raises(ValueError) as error:
        load_jsonl(path)
    assert f"{path}, line 3" in str(error.value)


@pytest.mark.parametrize(
    "record, field",
    [
        ({"prompt_ids": "abc"}, "prompt_ids"),
        ({"prompt_ids": [1, "2"]}, "prompt_ids.1"),
        ({"prompt_ids": [1], "loss_mask": [0.5]}, "loss_mask.0"),
        ({"prompt_ids": [1], "finish_reason": "exploded"}, "finish_reason"),
        ({"prompt_ids": [1], "turns": [{"text": "hi", "calls": [{"name": "c", "arguments": "x"}]}]},
         "turns.0.calls.0.arguments"),
        ({"prompt_ids": [1], "messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"response_ids": [1]}, "prompt_ids"),
    ],
)
def test_a_wrong_type_in_a_trajectory_file_names_the_file_the_line_and_the_field(tmp_path, record, field):
    path = save_jsonl([Trajectory(prompt_ids=[1])], tmp_path / "step.jsonl")
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")
    with pytest.raises(ValueError) as error:
        load_jsonl(path)
    assert f"{path}, line 2" in str(error.value)
    assert f"{field}: " in str(error.value)


def test_a_valid_trajectory_file_round_trips(tmp_path):
    from rlfactory_nb.types import ToolCall, ToolResult, Turn

    turn = Turn("hi", 2, [ToolCall("calc", {"x": 1})], [ToolResult("calc", "ok", "1")])
    trajectory = Trajectory([1], [2, 3], [1, 1], [-0.5, -0.25], [turn], [{"role": "user", "content": "q"}], id="a")
    assert load_jsonl(save_jsonl([trajectory], tmp_path / "step.jsonl")) == [trajectory]


# Sockets ---------------------------------------------------------------------------------------


def listening(process: psutil.Process) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port) for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN
    }


def test_the_weight_sync_store_listens_on_its_host_only():
    address = weight_sync.GroupAddress("127.0.0.1", weight_sync.free_port("127.0.0.1"), world_size=1)
    before = listening(psutil.Process())
    group = weight_sync.open_group(address, rank=0, device=torch.device("cpu"))
    weight_sync.send(group, {"w": torch.ones(2)}, torch.device("cpu"))
    opened = listening(psutil.Process()) - before
    assert ("127.0.0.1", address.port) in opened
    assert not {ip for ip, _ in opened} & WILDCARDS, f"listening on every interface: {opened}"


def test_a_second_rank_joins_the_store_that_listens_on_its_host_only():
    port = weight_sync.free_port("127.0.0.1")
    with ThreadPoolExecutor(1) as pool:  # rank 0 waits until every rank has joined
        hosting = pool.submit(weight_sync.open_store, "127.0.0.1", port, 2, 0)
        guest = weight_sync.open_store("127.0.0.1", port, world_size=2, rank=1)
        guest.set("greeting", "hello")
        assert hosting.result(timeout=60).get("greeting") == b"hello"


RAY_SCRIPT = """
import json, sys, psutil, ray
{start}
@ray.remote
def ping():
    return 1
ray.get(ping.remote())
sockets = set()
for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
    try:
        sockets |= {{(process.name(), c.laddr.ip) for c in process.net_connections("tcp") if c.status == "LISTEN"}}
    except psutil.Error:
        pass
print(json.dumps(sorted(sockets)))
ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "start",
    [
        "from rlfactory_nb.cluster import Cluster; Cluster.connect(num_cpus=1, object_store_memory_gb=0.1)",
        "from rlfactory_nb.config_cluster import ClusterConfig; from rlfactory_nb.cluster.workers import init_ray;"
        + " init_ray(ClusterConfig(object_store_memory_gb=0.1))",
    ],
    ids=["Cluster.connect", "init_ray"],
)
def test_a_local_ray_cluster_listens_on_loopback_only(start):
    """Slow: each case starts a whole local Ray in a fresh Python process."""
    script = textwrap.dedent(RAY_SCRIPT).format(start=start)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sockets = [tuple(pair) for pair in json.loads(done.stdout.strip().splitlines()[-1])]
    assert any(name == "gcs_server" for name, _ in sockets) and any(name == "raylet" for name, _ in sockets)
    exposed = [(name, ip) for name, ip in sockets if not is_loopback(ip)]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, an IPv6 socket bound to IPv4 loopback
    return address.is_loopback or (mapped is not None and mapped.is_loopback)
