#!/usr/bin/env bash
# One GPT forward + backward at the default size (batch 16 x 64 tokens,
# float64, 1 BLAS thread): the C++ step (gpt_bench), the same step called
# from Python (gpt_python.py, `import tinyllm`) and PyTorch's (gpt_torch.py,
# only where Debian's python3-torch is installed), side by side. The three
# run in short turns (about a second each), `rounds` times (default 10), and
# each keeps its best turn, so a neighbour's load on shared cores hits them
# alike and the best turns are the ones it spared.
# Usage: bench/python_vs_cpp.sh [build dir] [rounds]
set -euo pipefail
build=${1:-build}
rounds=${2:-10}
here=$(dirname "$0")
export OPENBLAS_NUM_THREADS=1 PYTHONPATH="$build/python"
tokens() { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["benchmarks"][0]["tokens/s"] if "benchmarks" in d else d["tokens_per_s"])'; }
has_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && has_torch=1
cpp=0 py=0 torch=0
best() { /usr/bin/python3 -c "print(max($1, $2))"; }
for _ in $(seq "$rounds"); do
  cpp=$(best "$cpp" "$("$build/bench/gpt_bench" --benchmark_format=json --benchmark_min_time=1 | tokens)")
  py=$(best "$py" "$(/usr/bin/python3 "$here/gpt_python.py" 5 | tokens)")
  if [ "$has_torch" = 1 ]; then torch=$(best "$torch" "$(/usr/bin/python3 "$here/gpt_torch.py" 5 | tokens)"); fi
done
/usr/bin/python3 - "$cpp" "$py" "$torch" "$has_torch" <<'PY'
import sys
cpp, py, torch, has_torch = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
print(f"{'C++ tok/s':>12} {'Python tok/s':>13} {'overhead':>9} {'PyTorch tok/s':>14}")
print(f"{cpp:12.0f} {py:13.0f} {100 * (cpp / py - 1):8.1f}% {torch if has_torch else float('nan'):14.0f}"
      + ("" if has_torch else "  (python3-torch not installed: no PyTorch column)"))
PY
