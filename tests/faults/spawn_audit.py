"""Records every process this interpreter starts (Python audit hooks) while a ToolSet from a config
file serves hostile tool calls; prints the record as JSON. Usage: python spawn_audit.py TOOLS_YAML"""

import asyncio
import json
import sys

STARTED: list[list[str]] = []
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")


def record(event: str, args: tuple) -> None:
    if event in PROCESS_EVENTS:
        STARTED.append([event, *(str(a) for a in args[:2])])


HOSTILE = [
    ("calculator", {"expression": "__import__('os').system('touch /tmp/rlf-pwned')"}),
    ("calculator", {"expression": "1", "command": "touch /tmp/rlf-pwned"}),
    ("calculator", '{"expression": "$(touch /tmp/rlf-pwned)"}'),
    ("sh", {"cmd": "touch /tmp/rlf-pwned"}),
    ("/bin/sh -c 'touch /tmp/rlf-pwned'", {}),
    ("python", {"code": "import os; os.system('touch /tmp/rlf-pwned')"}),
]


async def main(config: str) -> None:
    from rlfactory_nb.tools import ToolSet

    async with ToolSet.from_config(config, cache=False) as tools:
        results = await tools.call_many(HOSTILE)
    print(json.dumps({"started": STARTED, "statuses": [r.status for r in results]}))


if __name__ == "__main__":
    sys.addaudithook(record)
    asyncio.run(main(sys.argv[1]))
