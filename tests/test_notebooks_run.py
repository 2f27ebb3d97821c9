"""notebooks_run.slim: a saved notebook keeps static views and only the widget state still shown."""

import pytest

from rlfactory_nb.notebooks_run import WIDGET_STATE, WIDGET_VIEW, slim


def output(model, html=None):
    data = {"text/plain": "VBox(...)", WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": model}}
    if html is not None:
        data["text/html"] = html
    return {"output_type": "display_data", "data": data, "metadata": {}}


def notebook(outputs, models):
    state = {model: {"model_name": "VBoxModel", "state": {"children": [f"IPY_MODEL_{child}" for child in children]}}
             for model, children in models.items()}
    return {"cells": [{"cell_type": "code", "outputs": outputs}],
            "metadata": {"widgets": {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}}}


def test_a_view_with_a_static_fallback_keeps_only_the_fallback():
    slimmed = slim(notebook([output("aa", "<svg></svg>")], {"aa": ["a1"], "a1": []}))
    (kept,) = slimmed["cells"][0]["outputs"]
    assert set(kept["data"]) == {"text/plain", "text/html"}
    assert "widgets" not in slimmed["metadata"]  # nothing shows a widget any more: no state saved


def test_a_widget_without_a_fallback_keeps_its_state_and_its_childrens():
    models = {"aa": ["a1"], "a1": [], "bb": ["b1"], "b1": ["b2"], "b2": [], "cc": []}
    slimmed = slim(notebook([output("aa", "<p>static</p>"), output("bb")], models))
    assert WIDGET_VIEW in slimmed["cells"][0]["outputs"][1]["data"]
    assert set(slimmed["metadata"]["widgets"][WIDGET_STATE]["state"]) == {"bb", "b1", "b2"}


def test_a_notebook_whose_cell_reply_is_lost_runs_once_more_and_a_second_loss_is_raised(tmp_path):
    from nbclient.exceptions import CellTimeoutError

    from rlfactory_nb.notebooks_run import _execute

    class Papermill:
        def __init__(self, failures):
            self.failures, self.calls = failures, 0

        def execute_notebook(self, *args, **kwargs):
            self.calls += 1
            if self.calls <= self.failures:
                raise CellTimeoutError("A cell timed out while it was being executed, after 900 seconds.")

    once = Papermill(failures=1)
    _execute(once, tmp_path / "02.ipynb", tmp_path / "out.ipynb", {}, str(tmp_path), 900)
    assert once.calls == 2
    twice = Papermill(failures=2)
    with pytest.raises(CellTimeoutError):
        _execute(twice, tmp_path / "02.ipynb", tmp_path / "out.ipynb", {}, str(tmp_path), 900)
    assert twice.calls == 2


def test_notebook_kernels_talk_over_encrypted_sockets_and_print_no_warning(tmp_path, capfd):
    """ipykernel 7.4 prints "Kernel is running over TCP without encryption" for every plain kernel:
    four times in `make demo`. A real kernel, run as the demo runs it."""
    import nbformat
    import papermill
    import zmq

    from rlfactory_nb.notebooks_run import _execute

    if not zmq.has("curve"):
        pytest.skip("this pyzmq's libzmq has no CurveZMQ")
    source = nbformat.v4.new_notebook()
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source.cells = [nbformat.v4.new_code_cell(
        "import json, sys\n"
        "from ipykernel.kernelapp import IPKernelApp\n"
        "print(json.dumps(IPKernelApp.instance().curve_secretkey is not None))"
    )]
    nbformat.write(source, tmp_path / "in.ipynb")
    _execute(papermill, tmp_path / "in.ipynb", tmp_path / "out.ipynb", {}, str(tmp_path), 120)
    (cell,) = nbformat.read(tmp_path / "out.ipynb", 4).cells
    assert cell.outputs[0]["text"].strip() == "true"  # the kernel holds a Curve secret key
    assert "without encryption" not in capfd.readouterr().err


def test_only_cells_that_wait_on_a_job_get_the_long_bound():
    """A lost reply costs a cell's whole bound, so quick cells get QUICK_CELL_S; every cell of the
    shipped notebooks that waits on a job is tagged, or a slow machine would time it out."""
    import nbformat

    from rlfactory_nb.notebooks_run import NOTEBOOKS, QUICK_CELL_S, WAITS_FOR_JOB, cell_timeout, notebooks_dir

    assert cell_timeout({"metadata": {"tags": [WAITS_FOR_JOB]}}, timeout_s=900) == 900
    assert cell_timeout({"metadata": {}}, timeout_s=900) == QUICK_CELL_S < 900
    assert cell_timeout({"metadata": {}}, timeout_s=60) == 60
    waiting = []
    for name in NOTEBOOKS:
        for cell in nbformat.read(notebooks_dir() / name, 4).cells:
            if cell.cell_type == "code" and ".wait(" in cell.source:
                assert WAITS_FOR_JOB in cell.metadata.get("tags", []), f"{name}: {cell.source[:60]!r}"
                waiting.append(name)
    assert waiting == ["03_train_grpo.ipynb", "03_train_grpo.ipynb"]


async def test_the_client_looks_for_a_reply_again_every_slice_until_its_timeout():
    """A reply that a long poll missed is seen by the next short one (notebooks_run.sliced_reply_polls)."""
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    from rlfactory_nb.notebooks_run import sliced_reply_polls

    class Socket:
        def __init__(self, ready_after: int):
            self.polls: list[int | None] = []
            self.ready_after = ready_after

        async def poll(self, timeout_ms):
            self.polls.append(timeout_ms)
            return len(self.polls) > self.ready_after

    channel = AsyncZMQSocketChannel.__new__(AsyncZMQSocketChannel)
    channel.socket = Socket(ready_after=3)

    async def recv():
        return {"msg_type": "execute_reply"}

    channel._recv = recv
    with sliced_reply_polls(slice_s=0.01):
        assert (await channel.get_msg(timeout=120))["msg_type"] == "execute_reply"
        assert channel.socket.polls == [10, 10, 10, 10]  # four short polls, not one of 120 s
        channel.socket = Socket(ready_after=10**6)
        with pytest.raises(Empty):
            await channel.get_msg(timeout=0.05)  # the caller's timeout still holds
    assert AsyncZMQSocketChannel.get_msg is not None and "sliced" not in AsyncZMQSocketChannel.get_msg.__qualname__
