"""The python_sandbox server: ordinary runs, in-process and over stdio. Its limits (time, CPU, memory,
output, files, processes) are security cases: tests/faults/test_security.py."""

from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.python_sandbox import Limits, run_code

LIMITS = Limits(timeout_s=3, cpu_s=1, memory_mb=256, output_chars=300, output_file_mb=1)


async def test_ordinary_code_reports_exit_code_stdout_and_stderr():
    report = await run_code("import sys\nprint(6*7)\nprint('warn', file=sys.stderr)\nsys.exit(3)", LIMITS)
    assert (report.exit_code, report.stdout, report.stderr) == (3, "42\n", "warn\n")
    assert report.text().startswith("exit code 3\n--- stdout ---\n42")


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
