"""What one training step runs through: the package modules it executes, and its callbacks (calls
from a module into one that imports it: code handed down and called back up).

    python scripts/step_footprint.py [--example calculator] [--json]

Builds the example's run on its tiny preset (1 prompt x 2 samples, no eval, no checkpoint), starts
the trainer, then profiles exactly one `Trainer.step_once` with `sys.setprofile` (Python calls only).
Figures: modules executed, the module pairs that call across, and callbacks: a call from module A
into module B where B imports A, directly or through others (tests/test_import_graph.py reads the
imports), so A could only reach B through a function or object B handed it. The setup and
the first step's model loading are outside the measurement; the step's own work is inside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rlfactory_nb as rf
from rlfactory_nb.train.loop import Trainer
from tests.test_import_graph import edges

PACKAGE = str(ROOT / "rlfactory_nb")


def module_of(filename: str) -> str | None:
    if not filename.startswith(PACKAGE):
        return None
    return str(Path(filename).relative_to(ROOT).with_suffix("")).replace("/", ".").removesuffix(".__init__")


def reachable() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges():
        graph.setdefault(edge.source, set()).add(edge.target)
    closed: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        closed[start] = seen
    return closed


class Footprint:
    """Follows the main thread's Python calls (asyncio resumes a coroutine chain as calls)."""

    def __init__(self) -> None:
        self.modules: Counter[str] = Counter()
        self.crossings: Counter[tuple[str, str]] = Counter()
        self.callbacks: Counter[tuple[str, str]] = Counter()
        self.stack: list[str | None] = []
        self.imports = reachable()
        """module -> every package module it imports, directly or through others"""

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            module = module_of(frame.f_code.co_filename)
            caller = next((m for m in reversed(self.stack) if m is not None), None)
            if module is not None:
                self.modules[module] += 1
                if caller is not None and caller != module:
                    self.crossings[(caller, module)] += 1
                    if caller in self.imports.get(module, ()):
                        self.callbacks[(caller, f"{module}.{frame.f_code.co_qualname}")] += 1
            self.stack.append(module)
        elif event == "return" and self.stack:
            self.stack.pop()


async def measure(example: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cfg = rf.example(example).config({
            "output_dir": out, "grpo.steps": 1, "grpo.prompts_per_step": 1, "grpo.group_size": 2,
            "grpo.eval_every": 0, "grpo.checkpoint_every": 0,
        })
        trainer = await Trainer(cfg).start()
        try:
            await trainer.step_once()  # warm: first-call imports and caches stay out of the figures
            footprint = Footprint()
            sys.setprofile(footprint)
            try:
                await trainer.step_once()
            finally:
                sys.setprofile(None)
        finally:
            await trainer.close()
    return {
        "example": example,
        "modules": len(footprint.modules),
        "module_names": sorted(footprint.modules),
        "crossing_pairs": len(footprint.crossings),
        "callback_sites": len(footprint.callbacks),
        "callbacks": [f"{caller} -> {callee}" for caller, callee in sorted(footprint.callbacks)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="calculator")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args.example))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"one step of {result['example']}: {result['modules']} modules executed, "
          f"{result['crossing_pairs']} module-to-module call pairs, {result['callback_sites']} callback sites")
    for line in result["callbacks"]:
        print("  callback:", line)


if __name__ == "__main__":
    main()
