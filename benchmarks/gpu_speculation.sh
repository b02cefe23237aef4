#!/usr/bin/env bash
# What speculation on one GPU still has to show, in parts that each fit a
# few minutes:
#
#   bash benchmarks/gpu_speculation.sh OUTDIR [costs|speedup|grpc|all]
#   bash benchmarks/gpu_speculation.sh OUTDIR long 0.9|0.8|0.6 [CONCURRENCY...]
#
# costs:   the grammar masks of a verify round at batch 1-64 and acceptance
#          with the draft constrained or free (grammar_masks.json), then the
#          router's own work per round over gRPC at batch 1/16/64 with the
#          realistic-shape pair at acceptance about 0.9 (grpc_overhead.json).
# speedup: speedup over target-only against k and concurrency, k pinned and
#          adaptive, for the pair at acceptance about 0.8, 0.9 and 0.6 with
#          the scales found on the H200 (speculative_gpu.json), then the plots,
#          each row's rounds, where adaptive's time goes beside the best
#          fixed k and what it saw when it chose in the batches' tails
#          (speculative_gpu_round_costs.txt, ..._adaptive_gap.txt,
#          ..._tail_choices.txt).
# long:    the same for one pair, decoding at least 3072 tokens a row (512
#          by default), so that where a row's rounds fall in the text moves
#          the rows less (speculative_gpu_ACC[_CONCURRENCY].json). On an
#          H100 the rows at concurrency 1 take 4 minutes and those at 4, 16
#          and 64 together 2.5, after 4.5 of setting up: one call each,
#          `long 0.8 1` and `long 0.8 4 16 64`. REFILL=1: each concurrency
#          kept in flight, not closed batches (..._refill.json).
# grpc:    the same as three processes over gRPC on loopback, for the pair at
#          about 0.9 and the bundled pair in bf16 (speculative_grpc_*.json).
#
# Checkpoints go to $CHECKPOINTS (made once per machine).
set -euo pipefail
out=${1:?usage: gpu_speculation.sh OUTDIR [costs|speedup|grpc|all] | long ACC [CONCURRENCY...]}
part=${2:-all}
ckpt=${CHECKPOINTS:-/tmp/specserve-checkpoints}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(pwd) PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$out/gpu.csv"
read_rows() {  # the plots, each row's rounds, adaptive's gap to the best fixed k, its tails
  {  # (a reader that fails leaves the report and the parts after it to run)
    python3 benchmarks/plot_speculative.py "$1" &&
      python3 benchmarks/round_costs.py "$1" > "${1%.json}_round_costs.txt" &&
      python3 benchmarks/adaptive_gap.py "$1" | tee "${1%.json}_adaptive_gap.txt" &&
      python3 benchmarks/choices.py "$1" > "${1%.json}_tail_choices.txt"
  } || echo "reading $1 failed; the report is kept" >&2
}
pair() {  # the realistic-shape pair at acceptance about 0.9
  [ -f "$ckpt/pair-target/config.json" ] ||
    python3 benchmarks/shapes.py --out "$ckpt" --pair-scale 0.0010376
}
if [ "$part" = costs ] || [ "$part" = all ]; then
  python3 benchmarks/grammar_masks.py --device cuda --out "$out/grammar_masks.json" 2>&1 |
    tee "$out/grammar_masks.log"
  pair
  python3 benchmarks/grpc_overhead.py --target "$ckpt/pair-target" --draft "$ckpt/pair-draft" \
    --k 4 --dtype bfloat16 --device cuda --draft-gpu 0 --target-gpu 0 --batch 1 16 64 \
    --rounds-only --out "$out/grpc_overhead.json" 2>&1 | tee "$out/grpc_overhead.log" |
    grep -v '^\['
fi
if [ "$part" = speedup ] || [ "$part" = all ]; then
  python3 benchmarks/speculative_gpu.py --checkpoints "$ckpt" --acceptance 0.8 0.9 0.6 \
    --scales 0.0022583 0.0010376 0.0055542 --out "$out/speculative_gpu.json" 2>&1 |
    tee "$out/speculative_gpu.log"
  read_rows "$out/speculative_gpu.json"
fi
if [ "$part" = long ]; then
  acc=${3:?usage: gpu_speculation.sh OUTDIR long 0.9|0.8|0.6 [CONCURRENCY...]}
  case $acc in  # the scales found on the H200 for these acceptances
    0.9) scale=0.0010376 ;; 0.8) scale=0.0022583 ;; 0.6) scale=0.0055542 ;;
    *) echo "long: acceptance 0.9, 0.8 or 0.6, got $acc" >&2; exit 2 ;;
  esac
  shift 3
  name=speculative_gpu_$acc${1:+_$(IFS=_; echo "$*")}${REFILL:+_refill}
  python3 benchmarks/speculative_gpu.py --checkpoints "$ckpt" --acceptance "$acc" \
    --scales "$scale" --min-tokens 3072 ${1:+--concurrency "$@"} ${REFILL:+--refill} \
    --out "$out/$name.json" 2>&1 |
    tee "$out/$name.log"
  read_rows "$out/$name.json"
fi
if [ "$part" = grpc ] || [ "$part" = all ]; then
  pair
  python3 benchmarks/speculative_grpc.py --target "$ckpt/pair-target" \
    --draft "$ckpt/pair-draft" --name pair-0.9 --ks 2 4 6 --max-tokens 64 \
    --out "$out/speculative_grpc_pair.json" 2>&1 | tee "$out/speculative_grpc_pair.log"
  python3 benchmarks/speculative_grpc.py --target specserve/demo-target \
    --draft specserve/demo-draft --text --name bundled --ks 2 4 6 --max-tokens 64 \
    --out "$out/speculative_grpc_bundled.json" 2>&1 | tee "$out/speculative_grpc_bundled.log"
fi
