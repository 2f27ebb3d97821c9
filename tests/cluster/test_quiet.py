"""Ray's own log lines stay out of notebook cells unless something fails (cluster/quiet.py)."""

import logging
import uuid

import pytest
import ray

from rlfactory_nb.cluster import Cluster
from rlfactory_nb.cluster.quiet import quiet_ray_logs
from rlfactory_nb.cluster.shipping import upload

PACKAGING = logging.getLogger("ray._private.runtime_env.packaging")
TOKEN_SETUP = logging.getLogger("ray._private.authentication.authentication_token_setup")


class Cell(logging.Handler):
    """Stands in for Ray's stderr handler: what would show under the cell."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def cell():
    logger = logging.getLogger("ray")
    handler = Cell()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_info_and_warnings_are_held_back_and_errors_shown(cell):
    with quiet_ray_logs():
        PACKAGING.info("Creating a file package for local module '/tmp/x'.")
        TOKEN_SETUP.warning("Token authentication is enabled for this Ray cluster.")
        PACKAGING.error("something Ray thinks is wrong")
    assert cell.lines == ["something Ray thinks is wrong"]
    PACKAGING.info("after the block")
    assert cell.lines[-1] == "after the block"  # Ray's handler is back


def test_a_failure_shows_what_ray_said_before_the_error(cell):
    with pytest.raises(RuntimeError, match="upload failed"), quiet_ray_logs():
        PACKAGING.info("Pushing file package 'gcs://_ray_pkg_1.zip' (0.02MiB) to Ray cluster...")
        raise RuntimeError("upload failed")
    assert cell.lines == ["Pushing file package 'gcs://_ray_pkg_1.zip' (0.02MiB) to Ray cluster..."]


def test_connect_keeps_rays_start_up_notices_out_of_the_cell(cell, monkeypatch):
    def init(**options):
        TOKEN_SETUP.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
        TOKEN_SETUP.info("Generated new authentication token and saved to /root/.ray/auth_token")
        logging.getLogger("ray._private.worker").info("Started a local Ray instance.")
        return type("Context", (), {"dashboard_url": "127.0.0.1:8265"})()

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    cluster = Cluster.connect("auto")
    assert cluster.dashboard_url == "http://127.0.0.1:8265" and cell.lines == []


@pytest.mark.slow
def test_a_real_upload_prints_nothing(cluster, cell, tmp_path):
    """Ray's packaging lines, as `launch` uploads a project folder (a new one: Ray pushes each once)."""
    (tmp_path / "notes.txt").write_text(uuid.uuid4().hex)
    with quiet_ray_logs():
        env = upload({"working_dir": str(tmp_path)})
    assert env["working_dir"].startswith("gcs://") and cell.lines == []
    (tmp_path / "notes.txt").write_text(uuid.uuid4().hex)
    upload({"working_dir": str(tmp_path)})
    assert any("Pushing file package" in line for line in cell.lines)  # what the block kept out
