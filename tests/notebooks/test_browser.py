"""A real browser: JupyterLab on 127.0.0.1 with a token, Debian's chromium driven by Playwright.

Opens notebook 01 (a copy: JupyterLab autosaves outputs), runs all cells, and checks what a user
sees: the stepper widget renders, "Next turn" adds a turn, and the token strip shows trained and
masked tokens. A screenshot is kept in $RLFACTORY_NB_ARTIFACTS (default runs/test-artifacts).
`scripts/install_browser.sh` installs what it needs; without it the test skips and says why.
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

import pytest

from rlfactory_nb.notebooks_run import notebooks_dir

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = "01_setup_tools.ipynb"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path, tiny_policy):  # the preset is built before the browser waits on it
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="the playwright package is missing: pip install -e .[dev]")
    shutil.copy(notebooks_dir() / NOTEBOOK, tmp_path / NOTEBOOK)
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "RLFACTORY_NB_EXAMPLES": str(ROOT)}
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


def test_notebook_01_renders_the_stepper_and_the_token_strip(jupyterlab):
    from playwright.sync_api import expect, sync_playwright

    artifacts = Path(os.environ.get("RLFACTORY_NB_ARTIFACTS", ROOT / "runs" / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(jupyterlab)
            page.locator(".jp-Notebook").wait_for(timeout=60_000)
            choose_kernel(page)
            expect(page.locator(".jp-StatusBar-Widget", has_text="Idle").first).to_be_visible(timeout=60_000)
            page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
            page.locator(".lm-Menu-content").get_by_text("Run All Cells", exact=True).click()
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
            page.screenshot(path=str(artifacts / "browser_01_setup_tools.png"), full_page=True)
            browser.close()
