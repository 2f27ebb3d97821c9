"""Run the four notebooks headless with papermill: what `make demo` and the CI notebook test do.

The notebooks execute in order in their own folder (as in JupyterLab), each with the parameters it
declares picked out of one shared dict, so `steps` reaches 03 and `eval_size` 04. Notebook 03's run
is written under `<out_dir>/runs/` and 04 evaluates it from there. Each executed notebook is saved
next to an HTML export, and the paths are returned.

A saved notebook keeps each view's static HTML, not its widgets: in a headless run the views already
display only that, with figures that carry no plotly.js bundle (widgets/front_end.py), so plain
papermill saves light notebooks too. `slim` then drops any widget output that has a static fallback
next to it (widgets/_base.StaticFallback; plots as SVG from widgets/static.py), and the saved state of
every widget no output still shows. In a live front-end the widgets stay as they are.

    python -m rlfactory_nb.notebooks_run --out runs/demo steps=40 prompts_per_step=16 group_size=8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from queue import Empty
from typing import Any

import yaml

NOTEBOOKS = ("01_setup_tools.ipynb", "02_reward_design.ipynb", "03_train_grpo.ipynb", "04_eval.ipynb")
TEST_ONLY_NOTEBOOKS = ("05_distill.ipynb",)
"""notebooks `make test` runs on their own (tests/notebooks/test_distill_notebook.py) but `make demo`
leaves out, for its time goal: 05 trains three stages and evaluates five models"""
DEMO_PARAMETERS: dict[str, Any] = {"steps": 16, "prompts_per_step": 16, "group_size": 8, "max_staleness": 1, "eval_size": 32}
"""what `make demo` trains with: enough steps for the tiny model's reward to rise (a few minutes)"""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WAITS_FOR_JOB = "waits-for-job"
"""the tag of a cell that waits on training (notebook 03's `job.wait()`, notebook 05's runs in the
kernel): bounded by `timeout_s`"""
QUICK_CELL_S = 120
"""the bound on any other cell. The slowest of them takes 18 s on a quiet 2-core machine; the bound
is what a lost reply costs (`_execute`), so it is kept well under a job's wait"""
REPLY_POLL_S = 1.0
"""how long the kernel client's socket poll waits before it looks again (`sliced_reply_polls`)"""
_MODEL_REFERENCE = re.compile(r"IPY_MODEL_([0-9a-f]+)")


def notebooks_dir(project_dir: str | Path | None = None) -> Path:
    """notebooks/ of the project folder the user named (`project_dir`, $RLFACTORY_NB_EXAMPLES, or the
    package's checkout: examples.project_roots), never one found above the working directory."""
    # deferred: examples load the runtime (torch); running notebooks needs neither
    from rlfactory_nb.examples import find_project

    return find_project(f"notebooks/{NOTEBOOKS[0]}", project_dir) / "notebooks"


def run_notebooks(
    out_dir: str | Path | None = None,
    parameters: Mapping[str, Any] | None = None,
    notebooks: tuple[str, ...] = NOTEBOOKS,
    html: bool = True,
    timeout_s: int = 900,
    project_dir: str | Path | None = None,
) -> list[Path]:
    """Execute `notebooks` in order into `out_dir` (default runs/<timestamp>); returns the executed paths.

    A failing cell stops the sequence with papermill's error, which names the notebook and cell; the
    partly executed notebook is still written, to read what happened. `timeout_s` bounds each cell
    tagged `waits-for-job`, every other cell gets at most QUICK_CELL_S; a notebook whose cell times out
    runs once more (see `_execute`). `project_dir`: the project folder whose notebooks run (and whose
    examples their kernels load, through $RLFACTORY_NB_EXAMPLES); default: `notebooks_dir`'s."""
    import papermill

    out = Path(out_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    shared = {"output_dir": str(out / "runs"), **(parameters or {})}
    source = notebooks_dir(project_dir)
    if project_dir is not None:  # the kernels' `rf.example(...)` reads the same project
        os.environ["RLFACTORY_NB_EXAMPLES"] = str(source.parent)
    executed = []
    for name in notebooks:
        accepted = papermill.inspect_notebook(str(source / name))
        chosen = {key: value for key, value in shared.items() if key in accepted}
        target = out / name
        print(f"running {name} with {chosen}", flush=True)
        started = time.perf_counter()
        try:
            _execute(papermill, source / name, target, chosen, str(source), timeout_s)
        finally:
            if target.exists():
                before, after = slim_file(target)
                print(f"  saved with static views: {before / 1e6:.1f} MB -> {after / 1e6:.2f} MB", flush=True)
        print(f"  done in {time.perf_counter() - started:.0f} s -> {target}", flush=True)
        executed.append(target)
        if html:
            export_html(target)
    return executed


def cell_timeout(cell: Mapping[str, Any], timeout_s: int) -> int:
    """A cell's bound: `timeout_s` for one that waits on a job, at most QUICK_CELL_S for the rest."""
    if WAITS_FOR_JOB in cell.get("metadata", {}).get("tags", []):
        return timeout_s
    return min(timeout_s, QUICK_CELL_S)


def kernel_options() -> dict[str, Any]:
    """Encrypted kernel sockets where pyzmq has CurveZMQ, else papermill's defaults.

    ipykernel 7.4 warns on every kernel whose sockets are plain TCP ("Kernel is running over TCP
    without encryption"), four times in `make demo`, and it is right: any local user can connect to
    127.0.0.1. The kernel manager then provisions Curve keys when the kernelspec declares support
    (ipykernel's does), which silences the warning by removing its cause."""
    import zmq
    from traitlets.config import Config

    if not zmq.has("curve"):
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


@contextlib.contextmanager
def sliced_reply_polls(slice_s: float = REPLY_POLL_S) -> Iterator[None]:
    """While inside, the kernel client waits for a message in polls of `slice_s`, up to its timeout.

    A cell's reply can sit unseen on the client's socket: the kernel went idle in 27 ms, yet the client
    woke only when its poll timed out, 120 s later (`make demo`, notebook 02, 2026-12-05; the
    asyncio poll missed the socket's edge-triggered wakeup). A poll that ends looks at the socket
    again, so short polls see such a reply within `slice_s`."""
    from jupyter_client.channels import AsyncZMQSocketChannel

    original = AsyncZMQSocketChannel.get_msg

    async def get_msg(self: Any, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = slice_s if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await original(self, timeout=min(slice_s, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    AsyncZMQSocketChannel.get_msg = get_msg
    try:
        yield
    finally:
        AsyncZMQSocketChannel.get_msg = original


def _execute(papermill: Any, notebook: Path, target: Path, parameters: dict[str, Any], cwd: str, timeout_s: int) -> None:
    """papermill, run again once when a cell times out or the kernel dies: the kernel sometimes never
    answers a cell (it sits idle, the cell never completes). ipykernel 7 had one such race (a request
    stranded on the shell socket while a reply was sent; ipykernel #1529, in 7.4), yet with 7.4 one
    CI run on 2026-12-04 still lost three cells, while 24 runs of notebook 02 under load lost none:
    rare, and costly, since each costs its cell's whole bound; hence the short bound of quick cells
    (`cell_timeout`). A cell's own error is not retried."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    for attempt in (1, 2):
        try:
            with sliced_reply_polls():
                papermill.execute_notebook(
                    str(notebook), str(target), parameters=parameters, cwd=cwd,
                    kernel_name="python3", progress_bar=False, execution_timeout=timeout_s,
                    timeout_func=partial(cell_timeout, timeout_s=timeout_s), **kernel_options(),
                )
            return
        except (CellTimeoutError, DeadKernelError, TimeoutError) as error:
            if attempt == 2:
                raise
            print(f"  {notebook.name}: {type(error).__name__} ({error}); running it again", flush=True)


def slim(notebook: dict[str, Any]) -> dict[str, Any]:
    """`notebook` (nbformat JSON) without the widget outputs that have a static fallback, and without
    the saved state of widgets that no remaining output shows. Changes and returns `notebook`."""
    shown: set[str] = set()
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
            elif WIDGET_VIEW in data:
                shown.add(data[WIDGET_VIEW]["model_id"])
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {})
    models = saved.get("state", {})
    kept: set[str] = set()
    pending = [model for model in shown if model in models]
    while pending:  # a shown widget's children and layouts are referenced as IPY_MODEL_<id>
        model = pending.pop()
        if model not in kept:
            kept.add(model)
            pending += [ref for ref in _MODEL_REFERENCE.findall(json.dumps(models[model])) if ref in models]
    if kept:
        saved["state"] = {model: state for model, state in models.items() if model in kept}
    else:
        notebook.get("metadata", {}).pop("widgets", None)
    return notebook


def slim_file(path: Path) -> tuple[int, int]:
    """`slim` the notebook at `path` in place; returns its size in bytes before and after."""
    import nbformat

    before = path.stat().st_size
    nbformat.write(slim(nbformat.read(path, as_version=4)), path)
    return before, path.stat().st_size


def export_html(notebook: Path) -> Path:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(notebook, as_version=4))
    target = notebook.with_suffix(".html")
    target.write_text(body, encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlfactory_nb.notebooks_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="output folder (default runs/<timestamp>)")
    parser.add_argument("--ci", action="store_true", help="the notebooks' own small defaults instead of the demo's")
    parser.add_argument("--project-dir", default=None, help="the project folder (default: the package's checkout)")
    parser.add_argument("parameters", nargs="*", help="notebook parameters as key=value (YAML values)")
    args = parser.parse_args(argv)
    parameters = {} if args.ci else dict(DEMO_PARAMETERS)
    for item in args.parameters:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"parameter {item!r} must look like key=value")
        parameters[key] = yaml.safe_load(value)
    executed = run_notebooks(args.out, parameters, project_dir=args.project_dir)
    print(f"\nexecuted notebooks (and .html exports) in {executed[0].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
