"""Shared pieces for the tools tests: config entries that start the real test server over stdio."""

from pathlib import Path

import pytest

TEST_SERVER = Path(__file__).parent / "servers" / "test_server.py"


def _entry(name: str = "testing", **extra):
    return {"name": name, "command": "python", "args": [str(TEST_SERVER)], **extra}


@pytest.fixture(scope="session")
def server_entry():
    """Makes a server entry (our YAML format) for tests/tools/servers/test_server.py."""
    return _entry


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
