#!/usr/bin/env bash
# What a flag of `tinyllm train` costs or buys (--overlap, --bitwise): runs
# on procs with and without it, at each world and mode, the two interleaved
# REPEATS times so that both see the same machine. Prints a Markdown table
# for docs/PERFORMANCE.md: the median step time (steps after the first 2),
# the ratio, and what rank 0 sends per step.
#   bench/flag_cost.sh FLAG [build dir]
#   env: LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS MODES REPEATS
set -euo pipefail
flag=${1:?usage: bench/flag_cost.sh FLAG [build dir]}
build=${2:-build}
py=/usr/bin/python3
L=${LAYERS:-4} H=${HEADS:-4} C=${WIDTH:-128} T=${SEQ:-64} B=${BATCH:-16} S=${STEPS:-12} R=${REPEATS:-3}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--layers "$L" --heads "$H" --width "$C" --seq "$T" --batch "$B" --steps "$S" --backend procs)

env=""
for v in LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS MODES REPEATS; do if [ -n "${!v:-}" ]; then env+="$v='${!v}' "; fi; done
echo "Command: \`${env}bench/flag_cost.sh $flag $build\` — L=$L H=$H C=$C T=$T, global batch $B, $S steps (first 2" \
  "untimed), median of $R interleaved runs, $cores cores, max(1, cores/P) OpenBLAS threads per rank."
echo
echo "| world | mode | ms/step without | ms/step with $flag | with / without | MiB sent/step without | with |"
echo "|---:|---|---:|---:|---:|---:|---:|"
step_ms() {  # metrics file → mean ms per step over the steps after the first 2
  "$py" -c 'import json, sys
steps = [s for s in map(json.loads, open(sys.argv[1])) if "seconds" in s][2:]  # not the validation lines
print(1000 * sum(s["seconds"] for s in steps) / len(steps))' "$1"
}
sent_mib() {  # metrics file → rank 0's MiB sent in the last step
  "$py" -c 'import json, sys
last = [s for s in map(json.loads, open(sys.argv[1])) if "ranks" in s][-1]
print(last["ranks"][0]["bytes_sent"] / 2**20)' "$1"
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for P in ${WORLDS:-2 4}; do
  threads=$((cores / P > 1 ? cores / P : 1))
  for mode in ${MODES:-ddp zero1 zero2 zero3}; do
    zero=$([ "$mode" = ddp ] && echo 0 || echo "${mode#zero}")
    off=() on=()
    for _ in $(seq "$R"); do
      for with in "" "$flag"; do
        OPENBLAS_NUM_THREADS=$threads "$build/tinyllm" train --world "$P" --zero "$zero" "${args[@]}" $with \
          --metrics "$tmp/m.jsonl" > /dev/null
        if [ -z "$with" ]; then
          off+=("$(step_ms "$tmp/m.jsonl")") sent_off=$(sent_mib "$tmp/m.jsonl")
        else
          on+=("$(step_ms "$tmp/m.jsonl")") sent_on=$(sent_mib "$tmp/m.jsonl")
        fi
        rm -f "$tmp/m.jsonl"
      done
    done
    a=$(median "${off[@]}") b=$(median "${on[@]}")
    awk -v P="$P" -v m="$mode" -v a="$a" -v b="$b" -v x="$sent_off" -v y="$sent_on" \
      'BEGIN {printf "| %d | %s | %.1f | %.1f | %.2f | %.2f | %.2f |\n", P, m, a, b, b / a, x, y}'
  done
done
