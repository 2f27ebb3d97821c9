#!/usr/bin/env bash
# One prepared GPU check of the training core for real models (issues #14 and #20): GRPO steps of a
# Qwen3-1.7B-shaped model (random weights, the full 151,936-token vocabulary) on the local backend and
# the hf engine, bf16 compute: 2 steps of full fine-tuning over a float32 master, 2 with LoRA rank 16,
# 1 with a bf16 master as the contrast. Prints peak GPU memory, seconds per step, generated tokens/s
# and the fraction of weights one step at lr 1e-6 changes. See bench/gpu_check.py and docs/gpu.md.
#
#   bash bench/gpu_check.sh [--out DIR]   # one CUDA GPU; writes DIR/gpu_check.json (default: $OUT if set)
#   bash bench/gpu_check.sh --cpu-smoke   # a tiny shape on CPU, seconds (tests/bench/test_bench_memory.py)
#
# Needs only torch, transformers, peft and accelerate (plus tokenizers, numpy, pyyaml, tqdm, which
# those bring): no Ray, no vLLM, no mcp. The package is used from this checkout through PYTHONPATH,
# so no pip run can replace the machine's torch.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
cd "$(dirname "$0")/.."

"$PYTHON" -c 'import torch, transformers, peft, accelerate; print("torch", torch.__version__, "| transformers", transformers.__version__, "| peft", peft.__version__, "| accelerate", accelerate.__version__, "| cuda", torch.version.cuda, torch.cuda.is_available())'
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
exec "$PYTHON" bench/gpu_check.py "$@"
