#!/usr/bin/env bash
# The GPU forward on one GPU, all of it: correctness of the compiled kernels
# and of graph replay, the projections at small batch against the library
# GEMM, step times against the floor, and tokens/s through LLM against
# transformers. Results (JSON and logs) go to OUTDIR.
#
#   bash benchmarks/gpu_forward.sh OUTDIR
set -euo pipefail
out=${1:?usage: gpu_forward.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python benchmarks/gpu_forward_check.py --out "$out/check.json" 2>&1 | tee "$out/check.log"
python benchmarks/skinny_matmul.py --out "$out/skinny_matmul.json" 2>&1 | tee "$out/skinny.log"
python benchmarks/step_time.py --out "$out/step_time.json" 2>&1 | tee "$out/steps.log"
python benchmarks/end_to_end.py --checkpoints "${CHECKPOINTS:-/tmp/checkpoints}" \
  --out "$out/e2e.json" 2>&1 | tee "$out/e2e.log"
