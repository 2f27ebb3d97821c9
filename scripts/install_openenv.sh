#!/usr/bin/env bash
# Create the OpenEnv server venv (.venv-openenv) beside the project's venv.
#
# Why a second venv: openenv 0.10.0 requires fastmcp<4, which requires mcp<2, while the project needs
# mcp 2.3. Both cannot live in one environment. In real use an OpenEnv environment is a separate
# server process anyway (a container, a Hugging Face Space, `uvicorn app`), so the server gets its own
# interpreter and the project talks to it over its WebSocket protocol (rlfactory_nb/envs/adapters/openenv.py).
#
# Usage: scripts/install_openenv.sh [VENV]   (default: .venv-openenv next to this repository's pyproject)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo_root/.venv-openenv}"
OPENENV_VERSION="0.10.0"

if [[ ! -x "$venv/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet "openenv==$OPENENV_VERSION"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
from openenv.core.env_server import create_app  # noqa: F401  (fails loudly if the install is broken)
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: F401
for name in ("openenv", "fastmcp", "mcp"):
    print(f"install_openenv: {name} {md.version(name)}")
PY
