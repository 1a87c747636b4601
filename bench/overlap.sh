#!/usr/bin/env bash
# What --overlap buys: `tinyllm train --backend procs` with and without the
# communication thread, at each world and mode, the two runs interleaved
# REPEATS times so that both see the same machine. Prints a Markdown table
# of the median tokens/s (steps after the first 2) for docs/PERFORMANCE.md.
#   bench/overlap.sh [build dir]
#   env: LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS MODES REPEATS
set -euo pipefail
build=${1:-build}
py=/usr/bin/python3
L=${LAYERS:-4} H=${HEADS:-4} C=${WIDTH:-128} T=${SEQ:-64} B=${BATCH:-16} S=${STEPS:-12} R=${REPEATS:-3}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--layers "$L" --heads "$H" --width "$C" --seq "$T" --batch "$B" --steps "$S" --backend procs)

env=""
for v in LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS MODES REPEATS; do if [ -n "${!v:-}" ]; then env+="$v='${!v}' "; fi; done
echo "Command: \`${env}bench/overlap.sh $build\` — L=$L H=$H C=$C T=$T, global batch $B, $S steps (first 2 untimed)," \
  "median of $R interleaved runs, $cores cores, max(1, cores/P) OpenBLAS threads per rank."
echo
echo "| world | mode | tok/s without | tok/s with --overlap | with / without |"
echo "|---:|---|---:|---:|---:|"
tokens_per_s() {  # metrics file → tokens/s over the steps after the first 2
  "$py" -c 'import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print((len(steps) - 2) * int(sys.argv[2]) / sum(s["seconds"] for s in steps[2:]))' "$1" "$((B * T))"
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for P in ${WORLDS:-2 4}; do
  threads=$((cores / P > 1 ? cores / P : 1))
  for mode in ${MODES:-ddp zero1 zero2 zero3}; do
    zero=$([ "$mode" = ddp ] && echo 0 || echo "${mode#zero}")
    off=() on=()
    for _ in $(seq "$R"); do
      for flag in "" --overlap; do
        OPENBLAS_NUM_THREADS=$threads "$build/tinyllm" train --world "$P" --zero "$zero" "${args[@]}" $flag \
          --metrics "$tmp/m.jsonl" > /dev/null
        if [ -z "$flag" ]; then off+=("$(tokens_per_s "$tmp/m.jsonl")"); else on+=("$(tokens_per_s "$tmp/m.jsonl")"); fi
        rm -f "$tmp/m.jsonl"
      done
    done
    a=$(median "${off[@]}") b=$(median "${on[@]}")
    awk -v P="$P" -v m="$mode" -v a="$a" -v b="$b" 'BEGIN {printf "| %d | %s | %.0f | %.0f | %.2f |\n", P, m, a, b, b / a}'
  done
done
