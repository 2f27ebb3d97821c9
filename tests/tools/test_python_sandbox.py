"""The python_sandbox server: limits on wall time, CPU, memory and output, in real subprocesses."""

import time

from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.python_sandbox import Limits, run_code

LIMITS = Limits(timeout_s=3, cpu_s=1, memory_mb=256, output_chars=300, output_file_mb=1)


async def test_ordinary_code_reports_exit_code_stdout_and_stderr():
    report = await run_code("import sys\nprint(6*7)\nprint('warn', file=sys.stderr)\nsys.exit(3)", LIMITS)
    assert (report.exit_code, report.stdout, report.stderr) == (3, "42\n", "warn\n")
    assert report.text().startswith("exit code 3\n--- stdout ---\n42")


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


async def test_sandbox_over_stdio():
    server = {
        "name": "sandbox",
        "command": "python",
        "args": ["-m", "rlfactory_nb.tools.servers.python_sandbox", "--timeout-s", "2"],
    }
    async with ToolSet.from_config({"servers": [server]}, cache=False) as tools:
        ok, looping = await tools.call_many(
            [("run_python", {"code": "print(sum(range(10)))"}), ("run_python", {"code": "while True: pass"})]
        )
    assert ok.ok and "exit code 0" in ok.content and "45" in ok.content
    assert looping.ok and ("SIGXCPU" in looping.content or "wall-time" in looping.content)
