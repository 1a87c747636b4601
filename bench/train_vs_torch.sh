#!/usr/bin/env bash
# Training throughput at world 1, 2 and 4 for DDP and ZeRO stages 1-3:
# `tinyllm train --backend procs` beside PyTorch (bench/train_torch.py: the
# same GPT, float64, AdamW, global batch and data order), measured in the same
# run, with each rank's peak RSS. Prints a Markdown table for
# docs/PERFORMANCE.md.
#   bench/train_vs_torch.sh [build dir]
#   env: LAYERS HEADS WIDTH SEQ BATCH STEPS DATA WORLDS MODES, SKIP_TINYLLM=1
# Defaults: the trainer's default model, 12 steps of which the first 2 are
# untimed on both sides; the ranks share the cores, each with
# max(1, cores/P) OpenBLAS threads on both sides.
set -euo pipefail
build=${1:-build}
here=$(dirname "$0")
py=/usr/bin/python3
L=${LAYERS:-4} H=${HEADS:-4} C=${WIDTH:-128} T=${SEQ:-64} B=${BATCH:-16} S=${STEPS:-12}
data=${DATA:-/usr/share/common-licenses/GPL-3}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The same training on both sides: tinyllm train's defaults (the cosine
# schedule, two AdamW groups, clipping at 1), on the whole file without a
# validation part.
args=(--layers "$L" --heads "$H" --width "$C" --seq "$T" --batch "$B" --steps "$S" --data "$data" --lr 1e-3 --seed 1337
  --clip 1 --val-fraction 0)

env=""
for v in LAYERS HEADS WIDTH SEQ BATCH STEPS DATA WORLDS MODES SKIP_TINYLLM; do if [ -n "${!v:-}" ]; then env+="$v='${!v}' "; fi; done
echo "Command: \`${env}bench/train_vs_torch.sh $build\` — L=$L H=$H C=$C T=$T, vocab 256, float64," \
  "global batch $B, $S steps (first 2 untimed), data $data, $cores cores," \
  "PyTorch $($py -c 'import torch; print(torch.__version__)') (Debian python3-torch $(dpkg-query -W -f '${Version}' python3-torch 2>/dev/null || echo '?'))."
echo
echo "| world | mode | tinyllm tok/s | pytorch tok/s | ratio | tinyllm peak RSS MiB per rank | pytorch peak RSS MiB per rank | pytorch peer |"
echo "|---:|---|---:|---:|---:|---|---|---|"
for P in ${WORLDS:-1 2 4}; do
  threads=$((cores / P > 1 ? cores / P : 1))
  for mode in ${MODES:-ddp zero1 zero2 zero3}; do
    zero=$([ "$mode" = ddp ] && echo 0 || echo "${mode#zero}")
    metrics=-
    if [ -z "${SKIP_TINYLLM:-}" ]; then
      metrics=$tmp/m.jsonl
      rm -f "$metrics"
      OPENBLAS_NUM_THREADS=$threads "$build/tinyllm" train --world "$P" --zero "$zero" --backend procs "${args[@]}" \
        --metrics "$metrics" > "$tmp/tinyllm.log"
    fi
    "$py" "$here/train_torch.py" --world "$P" --mode "$mode" "${args[@]}" 2> "$tmp/torch.err" | tail -n 1 > "$tmp/torch.json" ||
      { cat "$tmp/torch.err" >&2; exit 1; }
    "$py" - "$metrics" "$tmp/torch.json" "$P" "$mode" "$B" "$T" <<'EOF'
import json, sys
metrics, peer_json, P, mode, B, T = sys.argv[1:]
mib = lambda xs: " / ".join(f"{x / 2**20:.0f}" for x in xs)
peer = json.load(open(peer_json))
theirs = peer["tokens_per_s"]
ours, our_rss, ratio = "–", "–", "–"
if metrics != "-":
    steps = [json.loads(line) for line in open(metrics) if line.strip()]
    ours = (len(steps) - 2) * int(B) * int(T) / sum(s["seconds"] for s in steps[2:])
    our_rss = mib(r["peak_rss_bytes"] for r in sorted(steps[-1]["ranks"], key=lambda r: r["rank"]))
    ratio, ours = f"{ours / theirs:.2f}", f"{ours:.0f}"
print(f"| {P} | {mode} | {ours} | {theirs:.0f} | {ratio} | {our_rss} | {mib(peer['peak_rss_bytes'])} |"
      f" {peer['peer'].split(' ', 2)[2]} |")
EOF
  done
done
echo
echo "ratio = tinyllm / pytorch tokens/s. PyTorch's FSDP (its ZeRO-2/3) refuses CPU-only execution in torch 1.x," \
  "so there zero2 and zero3 run the peer's closest thing, DDP + ZeroRedundancyOptimizer (ZeRO-1): the peer column says which ran."
