#!/usr/bin/env bash
# GPU smoke test: two GRPO steps on the calculator example with the vLLM engine, then the step times.
#
#   bash bench/gpu_smoke.sh [MODEL]        # MODEL: a hub id or local folder, default Qwen/Qwen3-0.6B
#
# Needs a CUDA GPU and `pip install '.[gpu]'`. One process (cluster.backend=local): the trainer and
# vLLM share GPU 0; vLLM takes its default 90% of the card's memory and the trainer (weights, grads,
# AdamW, activations) must fit in the rest, which suits a 0.6B model on an 80 GB+ card. Not yet run
# on a GPU by the project (see docs/gpu.md). Without a GPU it says so and exits 0, so CI can call it.
set -euo pipefail

MODEL="${1:-Qwen/Qwen3-0.6B}"
PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.."

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_smoke: no CUDA GPU visible to torch; nothing to do (this is not a failure)."
    exit 0
fi
if ! "$PYTHON" -c 'import vllm' 2>/dev/null; then
    echo "gpu_smoke: vllm is not importable; install it with: pip install '.[gpu]'" >&2
    exit 1
fi

OUT="$(mktemp -d "${TMPDIR:-/tmp}/rlfactory-gpu-smoke.XXXXXX")"
echo "gpu_smoke: model $MODEL, run folder $OUT/gpu-smoke"
"$PYTHON" -m rlfactory_nb.cli train examples/calculator/config.yaml \
    name=gpu-smoke output_dir="$OUT" model.name="$MODEL" model.engine=vllm model.device=cuda \
    cluster.backend=local grpo.steps=2 grpo.eval_every=0 grpo.checkpoint_every=0

"$PYTHON" - "$OUT/gpu-smoke" <<'PY'
import sys
from rlfactory_nb.train.metrics import read_metrics

for row in read_metrics(sys.argv[1]):
    print(
        f"step {row['step']}: {row['time/step_s']:.1f} s "
        f"(rollout {row['time/rollout_s']:.1f}, update {row['time/update_s']:.1f}, "
        f"sync {row['time/sync_s']:.2f}), reward {row['reward/mean']:.3f}, "
        f"{row['throughput/sampled_tokens_per_s']:.0f} sampled tokens/s"
    )
PY
