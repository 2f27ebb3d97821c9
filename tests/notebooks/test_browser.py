"""A real browser: JupyterLab on 127.0.0.1 with a token, Debian's chromium driven by Playwright.

Opens notebook 01 (a copy: JupyterLab autosaves outputs), runs all cells, and checks what a user
sees: the stepper widget renders, "Next turn" adds a turn, and the token strip shows trained and
masked tokens. Opens the dashboard of notebook 03's finished run live, and the HTML exports of the
executed notebooks with the network off (every request but file:// aborted): the token strip and the
plots must show without it. In the dashboard it checks the learning-rate axis range (0 to just above
the constant rate, not -0.5 to 1) and that a button that cannot act is disabled with its reason;
offline, that a long table cell stays on one line with its whole text on hover. Screenshots are kept
in $RLFACTORY_NB_ARTIFACTS (default runs/test-artifacts): the dashboard, and every notebook 01-04
executed with example="calculator" and example="gsm8k" (`notebook_<example>_<notebook>.png`). `scripts/install_browser.sh` installs what it needs; without it the
tests skip and say why.
"""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from rlfactory_nb.notebooks_run import notebooks_dir

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = "01_setup_tools.ipynb"
ARTIFACTS = Path(os.environ.get("RLFACTORY_NB_ARTIFACTS", ROOT / "runs" / "test-artifacts"))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def chromium():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing: pip install -e .[dev]")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def jupyterlab(tmp_path, tiny_policy, chromium):
    """The URL of notebook 01's copy in a fresh JupyterLab rooted at `tmp_path` (the preset is built
    before the browser waits on it)."""
    shutil.copy(notebooks_dir() / NOTEBOOK, tmp_path / NOTEBOOK)
    port, token = free_port(), secrets.token_hex(16)
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')  # no news toast over the page
    env = {  # settings and workspaces of its own: no notebook left open by an earlier run is restored
        **os.environ, "RLFACTORY_NB_EXAMPLES": str(ROOT),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
    }
    log = (tmp_path / "jupyter.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_server(f"http://127.0.0.1:{port}/api/status?token={token}", server, tmp_path / "jupyter.log")
        yield f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def wait_for_server(url, server, log, timeout_s=90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {timeout_s} s: {log.read_text()[-2000:]}")


def choose_kernel(page):
    """JupyterLab asks which kernel to start when none runs yet; the notebook's own is preselected."""
    dialog = page.locator(".jp-Dialog")
    try:
        dialog.wait_for(timeout=15_000)
    except Exception:  # noqa: BLE001  (no dialog: a kernel was started already)
        return
    dialog.get_by_role("button", name="Select").click()


def run_all_cells(page, url):
    from playwright.sync_api import expect

    page.goto(url)
    page.locator(".jp-Notebook").wait_for(timeout=60_000)
    choose_kernel(page)
    expect(page.locator(".jp-StatusBar-Widget", has_text="Idle").first).to_be_visible(timeout=60_000)
    page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-content").get_by_text("Run All Cells", exact=True).click()


def test_notebook_01_renders_the_stepper_and_the_token_strip(jupyterlab, chromium):
    """Slow: JupyterLab and chromium start, and notebook 01 runs in a fresh kernel."""
    from playwright.sync_api import expect

    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        run_all_cells(page, jupyterlab)
        stepper = page.locator(".rf-rollout-stepper").first
        expect(stepper).to_be_visible(timeout=180_000)
        expect(stepper).to_contain_text("ended:", timeout=180_000)  # the last cell stepped it to the end
        status = stepper.locator(".widget-html").first
        strip = stepper.locator(".rf-strip")

        for attempt in range(30):  # sample until the model calls a tool (about 1 in 3 rollouts do)
            stepper.get_by_role("button", name="Reset").click()
            expect(stepper).to_contain_text("turn 0 of", timeout=30_000)
            stepper.get_by_role("button", name="Next turn").click()
            expect(stepper).to_contain_text("turn 1 of", timeout=60_000)
            assert strip.locator(".rf-trained").count() > 0
            if "ended:" not in status.inner_text():
                stepper.get_by_role("button", name="Run to end").click()
                expect(stepper).to_contain_text("ended:", timeout=60_000)
            if strip.locator(".rf-masked").count() > 0:
                break
        else:
            pytest.fail("in 30 sampled rollouts the model never called a tool: no masked tokens to show")
        assert strip.locator(".rf-trained").count() > 0 and "ended:" in status.inner_text()
        hover = strip.locator(".rf-trained").first.get_attribute("title")
        assert hover.startswith("id ") and "logprob" in hover
    finally:
        page.screenshot(path=str(ARTIFACTS / "browser_01_setup_tools.png"), full_page=True)
        page.close()


@pytest.mark.timeout(1800)  # the first to ask for executed_notebooks runs papermill
def test_the_dashboard_of_a_finished_run(jupyterlab, chromium, executed_notebooks, tmp_path):
    """Notebook 03's finished run, attached from its run folder: what a user sees after training.
    Slow: JupyterLab and chromium start, and as the first reader of `executed_notebooks` it waits for the
    papermill run."""
    from playwright.sync_api import expect

    runs = executed_notebooks[0].parent / "runs"
    cells = ["import rlfactory_nb as rf", f"job = rf.TrainingJob.attach('calculator-notebook', output_dir={str(runs)!r})", "job.dashboard()"]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells], metadata={"kernelspec": kernel})
    nbformat.write(notebook, tmp_path / "dashboard.ipynb")
    page = chromium.new_page(viewport={"width": 1400, "height": 1800})  # the whole dashboard in view
    dashboard = page.locator(".rf-training-dashboard").first
    try:
        run_all_cells(page, jupyterlab.replace(NOTEBOOK, "dashboard.ipynb"))
        expect(dashboard.locator(".js-plotly-plot")).to_be_visible(timeout=120_000)
        expect(dashboard.get_by_role("button", name="Job finished")).to_be_disabled()
        stepper_button = dashboard.get_by_role("button", name="Step through a rollout with current weights")
        expect(stepper_button).to_be_visible()
        expect(stepper_button).to_be_disabled()  # attached from its run folder: no cluster to run an engine on
        assert "rf.Cluster.connect()" in stepper_button.get_attribute("title")
        # the learning-rate panel (the 7th: yaxis7) spans 0 to just above the run's constant rate
        lr_range = dashboard.locator(".js-plotly-plot").first.evaluate("plot => plot._fullLayout.yaxis7.range")
        assert lr_range[0] == 0 and 3e-4 < lr_range[1] < 4e-4, lr_range
        assert dashboard.locator(".js-plotly-plot").first.evaluate("plot => plot._fullLayout.xaxis7.title.text") == "step"
        choice = dashboard.locator("select").first
        expect(choice.locator("option").first).to_contain_text("step ", timeout=30_000)
        chosen = choice.evaluate("select => select.options[select.selectedIndex].text").replace("\xa0", " ")
        assert chosen.startswith("step 3 · reward"), chosen  # the last step's best rollout, its full label
        expect(dashboard.locator(".rf-strip").first).to_be_visible(timeout=60_000)  # the chosen rollout, shown
        ticks = dashboard.locator(".xtick text").all_text_contents()  # SVG text has no innerText
        assert ticks and all(tick.isdigit() for tick in ticks), ticks  # whole steps only
        # the step-time panel's own legend ("update" is in no title or label; the panels' legend layout is
        # unit-tested in tests/widgets/test_dashboard.py, and the screenshot below shows every one)
        expect(dashboard.locator(".js-plotly-plot")).to_contain_text("update")
    finally:
        (dashboard if dashboard.count() else page).screenshot(path=str(ARTIFACTS / "browser_dashboard.png"))
        page.close()


@pytest.mark.timeout(1800)
def test_html_exports_show_the_token_strip_and_plots_offline(chromium, executed_notebooks):
    """Slow: chromium starts; when it is the first reader of `executed_notebooks` it also waits for the
    papermill run."""
    from playwright.sync_api import expect

    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    folder = executed_notebooks[0].parent
    try:
        page.goto((folder / "01_setup_tools.html").as_uri())
        strip = page.locator(".rf-strip").first
        expect(strip).to_be_visible()
        assert strip.locator(".rf-trained").count() > 0
        page.goto((folder / "03_train_grpo.html").as_uri())
        plot = page.locator("svg.rf-plot:has(polyline)").first
        expect(plot).to_be_visible()
        assert plot.bounding_box()["width"] > 200
        page.screenshot(path=str(ARTIFACTS / "offline_03_train_grpo.png"), full_page=True)
    finally:
        context.close()


def test_a_policy_comparison_page_shows_the_coloured_strip_offline(chromium, tmp_path):
    """The static rendering of `comparison.view()` (also `rlfactory-nb compare`'s page), network off."""
    from playwright.sync_api import expect

    from rlfactory_nb.widgets.compare import page_html
    from tests.widgets.test_compare_view import hand_comparison

    page_file = tmp_path / "compare.html"
    page_file.write_text(f"<html><meta charset='utf-8'><body>{page_html(hand_comparison())}</body></html>", encoding="utf-8")
    context = chromium.new_context(viewport={"width": 1000, "height": 700})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    try:
        page.goto(page_file.as_uri())
        token = page.locator(".rf-strip .rf-change").first
        expect(token).to_be_visible()
        assert "rgb(33, 102, 172)" in token.evaluate("node => getComputedStyle(node).backgroundColor")  # the largest rise
        assert "p 0.368" in token.get_attribute("title")
        expect(page.locator("svg.rf-plot").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "offline_compare.png"), full_page=True)
    finally:
        context.close()


def test_a_long_table_cell_stays_on_one_line_with_its_text_on_hover(chromium, tmp_path):
    """The lab table wrapped a GSM8K question one word a line, so one row filled the view and the
    right columns were cut off; network off."""
    import pandas as pd

    from rlfactory_nb.widgets.reward_lab import table_html

    question = ("Mark's book has 197 pages. Mark reads 27 pages a day for 5 days, then 9 pages a day for 2 days. "
                "How many pages are left to read? Let's think step by step and output the final answer after \"####\".")
    rows = [{"prompt": p, "question": question, "answer": "#### 44", "gsm8k": 1.0, "errors": ""} for p in range(8)]
    page_file = tmp_path / "table.html"
    page_file.write_text(f"<html><meta charset='utf-8'><body>{table_html(pd.DataFrame(rows))}</body></html>", encoding="utf-8")
    context = chromium.new_context(viewport={"width": 1000, "height": 700})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    try:
        page.goto(page_file.as_uri())
        cell = page.locator(".rf-table td[title]").first
        assert cell.get_attribute("title") == question  # the whole text, on hover
        assert cell.bounding_box()["height"] < 30  # one line
        assert page.locator(".rf-table tr").nth(1).bounding_box()["height"] < 30
        assert page.locator(".rf-table-count").inner_text() == "8 samples"
        page.screenshot(path=str(ARTIFACTS / "offline_long_cell_table.png"), full_page=True)
    finally:
        context.close()


@pytest.fixture(scope="module")
def gsm8k_notebooks(tmp_path_factory, tiny_policy):
    """The four notebooks executed with example="gsm8k" (small: 2 steps, 4 held-out prompts)."""
    from rlfactory_nb.notebooks_run import run_notebooks

    from .conftest import CELL_TIMEOUT_S

    parameters = {"example": "gsm8k", "run_name": "gsm8k-notebook", "eval_size": 4, "n_prompts": 2, "group_size": 2}
    return run_notebooks(tmp_path_factory.mktemp("gsm8k"), parameters, timeout_s=CELL_TIMEOUT_S)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("example", ["calculator", "gsm8k"])
def test_screenshots_of_notebooks_01_to_04(example, chromium, request):
    """Each executed notebook's HTML export in chromium (network off), kept as a test artifact:
    $RLFACTORY_NB_ARTIFACTS/notebook_<example>_<notebook>.png. Slow: the papermill runs."""
    from playwright.sync_api import expect

    executed = request.getfixturevalue("executed_notebooks" if example == "calculator" else "gsm8k_notebooks")
    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    try:
        for notebook in executed:
            page.goto(notebook.with_suffix(".html").as_uri())
            expect(page.locator(".jp-Cell").first).to_be_visible()
            assert not page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] >> text=Traceback").count()
            shot = ARTIFACTS / f"notebook_{example}_{notebook.stem}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
    finally:
        context.close()
