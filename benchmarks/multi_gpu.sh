#!/usr/bin/env bash
# Speculation across GPUs at realistic shapes (random bf16 weights in the
# shapes of Qwen3-8B and Qwen3-0.6B): the target at tensor-parallel sizes 1
# and, with two GPUs, 2 (tp); then the draft and target workers as gRPC
# processes on GPUs of their own, the second GPU for the target when there is
# one (grpc).
#
#   bash benchmarks/multi_gpu.sh OUTDIR [tp|grpc|pair|all]
#
# pair: the realistic-shape pair (shapes.py --pair-scale, acceptance about
# 0.8) over gRPC, draft and target on GPUs of their own, with and without
# overlap (two micro-batches in flight): grpc_overhead_pair.{json,log}.
#
# Writes gpus.csv, tensor_parallel.{json,log} (tp) and grpc_overhead.{json,log}
# (grpc) into OUTDIR; each part takes several minutes on an H200. Checkpoints
# go to $CHECKPOINTS (made once).
set -euo pipefail
out=${1:?usage: multi_gpu.sh OUTDIR [tp|grpc|pair|all]}
part=${2:-all}
ckpt=${CHECKPOINTS:-/tmp/specserve-checkpoints}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(pwd) PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv | tee "$out/gpus.csv"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ -d "$ckpt/qwen3-8b" ] || python3 benchmarks/shapes.py --out "$ckpt"
if [ "$part" = tp ] || [ "$part" = all ]; then
  sizes=1
  [ "$gpus" -gt 1 ] && sizes="1 2"
  # shellcheck disable=SC2086
  python3 benchmarks/tensor_parallel.py --target "$ckpt/qwen3-8b" --draft "$ckpt/qwen3-0.6b" \
    --tp $sizes --num-kv-blocks 2048 --out "$out/tensor_parallel.json" 2>&1 |
    tee "$out/tensor_parallel.log"
fi
if [ "$part" = grpc ] || [ "$part" = all ]; then
  target_gpu=$((gpus > 1 ? 1 : 0))
  python3 benchmarks/grpc_overhead.py --target "$ckpt/qwen3-8b" --draft "$ckpt/qwen3-0.6b" \
    --k 5 --dtype bfloat16 --device cuda --draft-gpu 0 --target-gpu "$target_gpu" \
    --max-tokens 32 --num-kv-blocks 2048 --out "$out/grpc_overhead.json" 2>&1 |
    tee "$out/grpc_overhead.log" | grep -v '^\['
fi
if [ "$part" = pair ] || [ "$part" = all ]; then
  target_gpu=$((gpus > 1 ? 1 : 0))
  [ -d "$ckpt/pair-target" ] || python3 benchmarks/shapes.py --out "$ckpt" --pair-scale 0.00226
  python3 benchmarks/grpc_overhead.py --target "$ckpt/pair-target" --draft "$ckpt/pair-draft" \
    --k 4 --dtype bfloat16 --device cuda --draft-gpu 0 --target-gpu "$target_gpu" \
    --batch 1 16 64 --out "$out/grpc_overhead_pair.json" 2>&1 |
    tee "$out/grpc_overhead_pair.log" | grep -v '^\['
fi
