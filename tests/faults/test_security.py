"""Security: tool arguments and model text are untrusted. The calculator evaluates arithmetic only;
the python sandbox enforces time, CPU, memory, output, file-write and process limits; no code path
evaluates model text; only commands from the tools config are started; servers bind 127.0.0.1
(the Ray dashboard check is in test_jobs.py, next to its cluster). See docs/security.md."""

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfactory_nb.tools.servers import confine
from rlfactory_nb.tools.servers.calculator import evaluate
from rlfactory_nb.tools.servers.python_sandbox import Limits, run_code

from .conftest import ROOT

pytestmark = pytest.mark.timeout(120)
PACKAGE = ROOT / "rlfactory_nb"
LIMITS = Limits(timeout_s=3, cpu_s=1, memory_mb=256, output_chars=300, output_file_mb=1)
CONFINED = confine.prepare()
needs_landlock = pytest.mark.skipif(not CONFINED.landlock_abi, reason="the kernel has no Landlock")
needs_seccomp = pytest.mark.skipif(not CONFINED.no_processes, reason="no seccomp filter for this architecture")


# -- the calculator ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('id')",
        "(1).__class__.__bases__",
        "open('/etc/passwd').read()",
        "x + 1",
        "[1, 2][0]",
        "'a' * 3",
        "[x for x in (1, 2)]",
        "lambda: 1",
        "sqrt(x=4)",
    ],
)
def test_anything_but_arithmetic_is_refused(expression):
    result = evaluate(expression)
    assert result.startswith("error: only numbers")


@pytest.mark.parametrize(
    "expression", ["10**10**10", "9**9**9", "2**100000", "(10**999)*(10**999)", "1e308*10"]
)
def test_huge_results_are_refused_fast(expression):
    start = time.perf_counter()
    assert evaluate(expression).startswith("error: result too large")
    assert time.perf_counter() - start < 0.1


# -- the python sandbox -------------------------------------------------------------------------------

async def test_infinite_loop_is_stopped_by_the_cpu_limit():
    start = time.perf_counter()
    report = await run_code("while True:\n    pass", LIMITS)
    assert report.exit_code is not None and report.exit_code < 0 and "SIGXCPU" in report.text()
    assert time.perf_counter() - start < LIMITS.timeout_s


async def test_sleeping_forever_is_stopped_by_the_wall_time_limit():
    report = await run_code("import time\ntime.sleep(60)", Limits(timeout_s=0.5))
    assert report.timed_out and "wall-time" in report.text()


async def test_memory_bomb_fails_inside_the_limit():
    report = await run_code("x = bytearray(4 * 1024**3)\nprint('allocated')", LIMITS)
    assert report.exit_code == 1 and "MemoryError" in report.stderr and "allocated" not in report.stdout


async def test_huge_output_is_capped():
    report = await run_code("while True:\n    print('spam' * 100)", LIMITS)
    assert report.exit_code != 0
    assert len(report.stdout) < LIMITS.output_chars + 100 and "truncated" in report.stdout


async def test_code_runs_in_a_fresh_temporary_directory():
    first = await run_code("import os\nopen('mark', 'w').write('x')\nprint(os.getcwd())", LIMITS)
    second = await run_code("import os\nprint(os.path.exists('mark'))", LIMITS)
    assert "rlf-sandbox-" in first.stdout and second.stdout == "False\n"


@needs_landlock
async def test_the_sandbox_cannot_write_or_delete_outside_its_temporary_directory(tmp_path):
    target, victim = tmp_path / "written.txt", tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = (
        "import os, tempfile\n"
        "open('inside.txt', 'w').write('ok'); print(open('inside.txt').read())\n"
        "with tempfile.NamedTemporaryFile() as f: f.write(b'ok'); print('tempfile ok')\n"
        f"for attempt in (lambda: open({str(target)!r}, 'w'), lambda: os.remove({str(victim)!r}),\n"
        f"                lambda: os.mkdir({str(tmp_path / 'dir')!r}), lambda: open('/etc/rlf-test', 'a')):\n"
        "    try: attempt(); print('WROTE')\n"
        "    except PermissionError: print('refused')\n"
    )
    report = await run_code(code, LIMITS)
    assert report.exit_code == 0, report.text()
    assert report.stdout.split() == ["ok", "tempfile", "ok", "refused", "refused", "refused", "refused"]
    assert not target.exists() and victim.read_text() == "keep me"


@needs_seccomp
@pytest.mark.parametrize(
    "start",
    [
        "os.fork()",
        "subprocess.run(['true'])",
        "assert os.system('true') == 0, 'os.system failed'",
        "p = multiprocessing.Process(target=print)\n    p.start()\n    p.join()",
    ],
    ids=["fork", "subprocess", "os.system", "multiprocessing"],
)
async def test_the_sandbox_cannot_start_processes(start):
    code = (
        "import os, subprocess, multiprocessing\n"
        f"try:\n    {start}\n    print('ran')\n"
        "except (OSError, AssertionError) as error:\n    print('refused:', error)"
    )
    report = await run_code(code, LIMITS)
    assert report.stdout.startswith("refused:"), report.text()


@needs_seccomp
async def test_threads_still_work_in_the_sandbox():
    code = "import threading\nt = threading.Thread(target=print, args=('from a thread',))\nt.start(); t.join()"
    report = await run_code(code, LIMITS)
    assert (report.exit_code, report.stdout) == (0, "from a thread\n")


@pytest.mark.skipif(CONFINED.landlock_abi < 4, reason="TCP rules need Landlock ABI 4")
async def test_the_sandbox_cannot_open_tcp_connections():
    code = "import socket\ntry: socket.create_connection(('127.0.0.1', 9), timeout=2)\nexcept PermissionError: print('refused')\nexcept OSError as e: print('reached the network', e)"
    assert (await run_code(code, LIMITS)).stdout == "refused\n"


# -- no code path evaluates model text -----------------------------------------------------------------

EVALUATORS = {"eval", "exec", "compile", "__import__"}
# Dynamic imports, each of a name from a config file or the package's own table, never model text.
DYNAMIC_IMPORTS = {
    ("__init__.py", "import_module"),  # lazy attributes of rlfactory_nb itself
    ("cluster/__init__.py", "import_module"),  # lazy attributes of rlfactory_nb.cluster, from its constant table
    ("tools/__init__.py", "import_module"),  # lazy attributes of rlfactory_nb.tools, from its constant table
    ("code_names.py", "import_module"),  # the code a run config names: reward.function, rollout.env,
    # rollout.program, grpo.loss, a tools file's functions:, and a checker worker's function
    ("code_names.py", "exec_module"),  # the same, given as `path/to/file.py:name`
    ("cli/__init__.py", "import_module"),  # a subcommand's own module, named in the CLI itself
    ("train/backends.py", "import_module"),  # a backend's module from the constant BACKEND_MODULES
    ("cluster/shipping.py", "import_module"),  # the package launch staged the config's files into
    ("models/presets/__init__.py", "import_module"),  # the constant RECIPE_PRESETS: a recipe's preset builder
    ("data/rows.py", "import_module"),  # the constant RECIPES, whose import registers the synthetic datasets
    ("_views.py", "import_module"),  # the constant "rlfactory_nb.widgets", when a view is asked for
}
PROCESS_STARTERS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp",
           "execvpe", "execl", "execlp", "spawnv", "spawnve", "spawnl", "spawnlp"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn", "fork"},
}
# Every place the package starts a process itself; stdio MCP servers are started by the mcp SDK from a
# ServerConfig (checked at run time by test_only_commands_from_the_config_are_started).
STARTS_PROCESSES = {
    ("tools/servers/python_sandbox.py", "asyncio.create_subprocess_exec"),
    ("cluster/shipping.py", "subprocess.run"),  # sys.executable -c <fixed code>: a fresh sys.path, no input
    ("rewards/isolated.py", "subprocess.Popen"),  # sys.executable -c <fixed code>: a killable checker worker
    ("envs/adapters/openenv_server.py", "subprocess.Popen"),  # the OpenEnv server the user names
    # (openenv_env(app="module:app")): its own venv's python -m uvicorn, bound to 127.0.0.1
    # (math_verify), CPU-time capped; its requests name functions from our code, its input is JSON
}


def package_calls():
    """(path relative to the package, called name, first argument, receiver) for every call."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                receiver = None  # a plain name: a builtin or an imported function
                if isinstance(func, ast.Attribute):
                    receiver = func.value.id if isinstance(func.value, ast.Name) else ""
                yield str(path.relative_to(PACKAGE)), name, node.args[0] if node.args else None, receiver


def test_no_code_path_evaluates_text_with_eval_exec_or_compile():
    found = [
        (where, name) for where, name, first, receiver in package_calls()
        if name in EVALUATORS and receiver is None and not isinstance(first, ast.Constant)
    ]
    assert found == [], f"eval/exec/compile on non-literal input: {found}"


def test_dynamic_imports_are_only_of_names_from_config_files():
    found = {(where, name) for where, name, _, _ in package_calls() if name in ("import_module", "exec_module")}
    assert found <= DYNAMIC_IMPORTS, f"new dynamic import sites, review them: {found - DYNAMIC_IMPORTS}"


def test_the_package_starts_processes_only_where_reviewed():
    found = {
        (where, f"{receiver}.{name}") for where, name, _, receiver in package_calls()
        if name in PROCESS_STARTERS.get(receiver or "", ())
    }
    assert found == STARTS_PROCESSES, f"process start sites changed, review them: {found ^ STARTS_PROCESSES}"
    for path in PACKAGE.rglob("*.py"):  # no `from subprocess import run` hiding a start from the check
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"subprocess", "pty"}, path
        assert "shell=True" not in path.read_text(encoding="utf-8"), path


def test_only_commands_from_the_config_are_started(tmp_path):
    config = ROOT / "examples/calculator/tools.yaml"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("spawn_audit.py")), str(config)],
        capture_output=True, text=True, timeout=90, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["started"]) == 1, seen["started"]  # the calculator server, once
    event, executable, args = seen["started"][0]
    assert event == "subprocess.Popen" and executable == sys.executable
    assert "rlfactory_nb.tools.servers.calculator" in args
    # code in an expression is refused, an extra argument is ignored, names that are not tools are unknown
    assert seen["statuses"] == ["error", "ok", "error", "unknown_tool", "unknown_tool", "unknown_tool"]
    assert not Path("/tmp/rlf-pwned").exists()


def test_nothing_in_the_package_binds_all_interfaces():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "0.0.0.0" not in text and '"::"' not in text, f"{path} binds every interface"
    cluster = (PACKAGE / "cluster/ray_cluster.py").read_text(encoding="utf-8")
    assert 'dashboard_host="127.0.0.1"' in cluster
