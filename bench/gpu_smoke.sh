#!/usr/bin/env bash
# GPU smoke test: two GRPO steps of the calculator example on Ray with vLLM engine actors and FSDP
# policy workers, then each step's time split.
#
#   bash bench/gpu_smoke.sh [MODEL]        # MODEL: a hub id or local folder, default Qwen/Qwen3-0.6B
#
# Uses every visible GPU through cluster.num_gpus (see ClusterConfig.layout): with one GPU a policy
# worker and a vLLM engine share it (colocated, vLLM sleeping during the update); with N >= 2, N/2
# train with FSDP and N/2 generate, weights broadcast over NCCL. Needs `pip install '.[gpu]'`.
# Not yet run on a GPU by the project (see docs/gpu.md). Without a GPU it says so and exits 0.
set -euo pipefail

MODEL="${1:-Qwen/Qwen3-0.6B}"
PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.."

GPUS="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
if [ "$GPUS" = "0" ]; then
    echo "gpu_smoke: no CUDA GPU visible to torch; nothing to do (this is not a failure)."
    exit 0
fi
if ! "$PYTHON" -c 'import vllm' 2>/dev/null; then
    echo "gpu_smoke: vllm is not importable; install it with: pip install '.[gpu]'" >&2
    exit 1
fi

OUT="$(mktemp -d "${TMPDIR:-/tmp}/rlfactory-gpu-smoke.XXXXXX")"
ARGS=(examples/calculator/config.yaml name=gpu-smoke output_dir="$OUT" model="$MODEL" engine=vllm
      model.device=cuda cluster.backend=ray cluster.num_gpus="$GPUS" cluster.strategy=fsdp
      grpo.steps=2 grpo.eval_every=0 grpo.checkpoint_every=0)
echo "gpu_smoke: $GPUS GPU(s), model $MODEL, run folder $OUT/gpu-smoke"
"$PYTHON" -m rlfactory_nb.cli train "${ARGS[@]}" --dry-run | tail -n 1
"$PYTHON" -m rlfactory_nb.cli train "${ARGS[@]}"

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
