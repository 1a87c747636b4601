#!/usr/bin/env bash
# One GPT forward + backward at the default size, tinyllm against PyTorch
# (Debian's python3-torch, float64, same model and batch), in the same run,
# with 1 and 2 BLAS threads. Usage: bench/gpt_vs_torch.sh [build dir]
set -euo pipefail
build=${1:-build}
here=$(dirname "$0")
printf '%-8s %14s %14s %8s\n' threads tinyllm_tok/s pytorch_tok/s ratio
for threads in 1 2; do
  ours=$(OPENBLAS_NUM_THREADS=$threads "$build/bench/gpt_bench" --benchmark_format=json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["tokens/s"])')
  theirs=$(OPENBLAS_NUM_THREADS=$threads /usr/bin/python3 "$here/gpt_torch.py" 20 |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
  /usr/bin/python3 -c "print(f'{$threads:<8} {$ours:14.0f} {$theirs:14.0f} {$ours/$theirs:8.2f}')"
done
