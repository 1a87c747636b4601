#!/usr/bin/env bash
# Memory per rank: each forked rank's peak RSS beside a prediction of it, for
# DDP and ZeRO stages 1-3 at several world sizes, and the project's goals for
# how far RSS must fall with the stage. The ZeRO table says what the model
# state should be; this asks whether the process really is that small, and if
# not, by how much it is bigger than every term we can name.
#
#   bench/memory.sh [build dir] [--layers L] [--heads H] [--width C] [--seq T]
#                   [--batch B] [--steps S] [--worlds "2 4 8"] [--data FILE]
#   env: LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS DATA (flags win), CHECK=0
#        skips the activation check at a small size.
#   e.g. WORLDS="2 4" STEPS=3 bench/memory.sh build
#
# Each configuration is one `tinyllm train --steps S --world P --zero k
# --backend procs --metrics FILE`, one at a time. Per rank it prints
#   model state   params_bytes + grads_bytes + optimizer_bytes after a step
#                 (the ZeRO table, `tinyllm memory --world P`)
#   in-step extra peak_state_bytes - model state: what a step holds only
#                 transiently (stage 3's gather, the full gradients before the
#                 reduce-scatter), taken from the metrics, not hard-coded
#   activations   the tensors the forward keeps for backward and the
#                 activation gradients backward holds at once, counted from
#                 this codebase's ops for B/P rows (activation_bytes below)
#   base          the same rank's peak RSS in a run of a negligible model
#                 (--layers 1 --heads 1 --width 8 --seq 8) at the same P
#   prediction    the sum of the four; then the in-step peak
#                 (peak_state_bytes), the peak RSS (peak_rss_bytes: each
#                 forked rank's own getrusage ru_maxrss; fork resets it), the
#                 ratio RSS / prediction and the ratio to DDP's RSS at this P.
# Memory: a configuration that would not fit in MemAvailable is skipped with
# a message. Not part of ctest.
set -euo pipefail

build=build
L=${LAYERS:-8} H=${HEADS:-12} C=${WIDTH:-768} T=${SEQ:-64} B=${BATCH:-8} S=${STEPS:-3}
worlds=${WORLDS:-2 4 8}
data=${DATA:-/usr/share/common-licenses/GPL-3}
while [ $# -gt 0 ]; do
  case $1 in
    --layers) L=$2; shift 2 ;;
    --heads) H=$2; shift 2 ;;
    --width) C=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --steps) S=$2; shift 2 ;;
    --worlds) worlds=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench/memory.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
V=256  # byte-level tokens
py=/usr/bin/python3
tinyllm=$build/tinyllm
[ -x "$tinyllm" ] || { echo "bench/memory.sh: $tinyllm not found (build the tinyllm_app target)" >&2; exit 1; }
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.tsv  # P mode rank state peak_state rss base act_forward act_backward
: > "$results"

# Runs one configuration; the per-step JSON lines land in $1. Each rank gets
# max(1, cores/P) OpenBLAS threads, the base run the same as the real one.
run_train() {
  local metrics=$1 P=$2 zero=$3
  shift 3
  rm -f "$metrics"
  OPENBLAS_NUM_THREADS=$((cores / P > 1 ? cores / P : 1)) \
    "$tinyllm" train --steps "$S" --world "$P" --zero "$zero" --backend procs --data "$data" --metrics "$metrics" \
    "$@" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log" >&2; return 1; }
}

# Per rank: "rank state peak_state rss", from the metrics (the state of the
# last step; peaks are the largest over the steps).
per_rank_figures() {
  "$py" - "$1" <<'EOF'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for rank in sorted({r["rank"] for r in steps[-1]["ranks"]}):
    mine = [r for s in steps for r in s["ranks"] if r["rank"] == rank]
    last = mine[-1]
    print(rank, last["params_bytes"] + last["grads_bytes"] + last["optimizer_bytes"],
          max(r["peak_state_bytes"] for r in mine), max(r["peak_rss_bytes"] for r in mine))
EOF
}

# "forward backward" bytes of activations for one rank's rows, counted from
# the ops in src/tensor and src/nn. The autograd graph holds every non-leaf
# tensor until backward ends (each Node keeps its inputs; run_backward's
# topological order keeps them all), plus what the ops save beside them:
#   embedding  wte rows [N,C], wpe's slice [T,C], their sum x0 [N,C]
#   per block  ln_1 out [N,C] + mean, rstd [N] each; c_attn out qkv [N,3C];
#              q, k, v (slice copies) [N,C] each; attention out [N,C] + its
#              probabilities [b,H,T,T]; c_proj out [N,C]; h = x + attn [N,C];
#              ln_2 out [N,C] + mean, rstd; c_fc out [N,4C]; gelu out [N,4C]
#              + its sigmoid [N,4C]; mlp c_proj out [N,C]; block out [N,C]
#              = 25C + H·T + 4 doubles per token
#   head       ln_f out [N,C] + mean, rstd; logits [N,V]; cross-entropy's
#              lse [N] = 3C + V + 3 doubles per token with the embedding's
# (N = b·T tokens, b = B/P rows). Backward then walks the graph in reverse,
# giving each input a gradient buffer and freeing a tensor's own gradient and
# saved extras (not its value) once its node has run. The storage cache
# (src/tensor/storage.cpp) reuses a freed block only for the same byte size,
# so what stays resident is, per size, the most blocks alive at once; this
# replays the graph to count them. Blocks of 2 MiB and up are 2 MiB aligned
# huge pages, so they count rounded up to 2 MiB; smaller ones to 4 KiB pages.
activation_bytes() {
  "$py" - "$@" <<'EOF'
import sys
from collections import defaultdict
L, H, C, T, V, b = map(int, sys.argv[1:])
N = b * T
def resident(numel):
    size = 8 * numel
    page = 2 << 20 if size >= 2 << 20 else 4096
    return -(-size // page) * page
graph = []  # (name, numel, non-leaf inputs, numels saved beside the output)
def op(name, numel, inputs=(), saved=()):
    graph.append((name, numel, list(inputs), list(saved)))
op("wte", N * C); op("wpe", T * C); op("x0", N * C, ["wte", "wpe"])
x = "x0"
for l in range(L):
    p = f"h.{l}."
    op(p + "ln_1", N * C, [x], [N, N])
    op(p + "qkv", 3 * N * C, [p + "ln_1"])
    for part in "qkv":
        op(p + part, N * C, [p + "qkv"])
    op(p + "attn", N * C, [p + "q", p + "k", p + "v"], [b * H * T * T])
    op(p + "attn.c_proj", N * C, [p + "attn"])
    op(p + "h", N * C, [x, p + "attn.c_proj"])
    op(p + "ln_2", N * C, [p + "h"], [N, N])
    op(p + "c_fc", 4 * N * C, [p + "ln_2"])
    op(p + "gelu", 4 * N * C, [p + "c_fc"])
    op(p + "mlp.c_proj", N * C, [p + "gelu"])
    op(p + "out", N * C, [p + "h", p + "mlp.c_proj"])
    x = p + "out"
op("ln_f", N * C, [x], [N, N]); op("logits", N * V, ["ln_f"]); op("loss", 1, ["logits"], [N])
numel = {name: n for name, n, _, _ in graph}
live, most = defaultdict(int), defaultdict(int)
def take(n):
    live[resident(n)] += 1
    most[resident(n)] = max(most[resident(n)], live[resident(n)])
def give(n):
    live[resident(n)] -= 1
for name, n, _, saved in graph:
    for m in [n] + saved: take(m)
forward = sum(size * count for size, count in live.items())
with_grad = {"loss"}
take(1)  # the seed
for name, n, inputs, saved in reversed(graph):
    for i in inputs:
        if i not in with_grad:
            with_grad.add(i)
            take(numel[i])
    with_grad.discard(name)
    for m in [n] + saved: give(m)  # its gradient and what it saved; its value stays until the end
total = sum(size * count for size, count in most.items())
print(forward, total - forward)
EOF
}

# Bytes this machine can still give without swapping.
available_bytes() { echo $(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024)); }

# Whether P ranks of this configuration fit: each needs its in-step peak
# (the table's, `tinyllm memory`), its activations, the base and, as slack
# for what today's ranks hold beyond the table, n·8 more.
fits_in_memory() {
  local P=$1 zero=$2 activations=$3 base=$4
  local need
  need=$("$tinyllm" memory --world "$P" --layers "$L" --heads "$H" --width "$C" --seq "$T" |
    "$py" -c '
import re, sys
mode, P, act, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
text = sys.stdin.read()
n = int(re.search(r"n = (\d+) parameters", text).group(1))
peak = max(int(line.split()[-1]) for line in text.splitlines() if line.startswith(mode + " "))
print(P * (peak + act + base + 8 * n))' "$([ "$zero" = 0 ] && echo DDP || echo "ZeRO-$zero")" "$P" "$activations" "$base")
  local have
  have=$(available_bytes)
  if [ "$need" -gt "$have" ]; then
    echo "skipped: --world $P --zero $zero needs about $((need >> 20)) MiB, $((have >> 20)) MiB available" >&2
    return 1
  fi
}

# The runtime's own peak RSS per rank at P: a negligible model, same backend.
# Prints "rank rss" lines.
measure_base() {
  local P=$1
  run_train "$tmp/base.jsonl" "$P" 0 --layers 1 --heads 1 --width 8 --seq 8 --batch "$P"
  per_rank_figures "$tmp/base.jsonl" | awk '{ print $1, $4 }'
}

# Runs DDP (or one process at P = 1) and each stage at P and appends a row
# per rank to $results.
measure_world() {
  local P=$1 modes zero
  modes=$([ "$P" = 1 ] && echo 0 || echo "0 1 2 3")
  if [ $((B % P)) -ne 0 ]; then
    echo "skipped: --batch $B does not divide by world $P" >&2
    return 0
  fi
  measure_base "$P" > "$tmp/base.txt"
  read -r act_forward act_backward <<< "$(activation_bytes "$L" "$H" "$C" "$T" "$V" $((B / P)))"
  local base_max
  base_max=$(awk '$2 > m { m = $2 } END { print m }' "$tmp/base.txt")
  for zero in $modes; do
    fits_in_memory "$P" "$zero" $((act_forward + act_backward)) "$base_max" || continue
    echo "running --world $P --zero $zero ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
    run_train "$tmp/run.jsonl" "$P" "$zero" --layers "$L" --heads "$H" --width "$C" --seq "$T" --batch "$B"
    per_rank_figures "$tmp/run.jsonl" | while read -r rank state peak rss; do
      base=$(awk -v r="$rank" '$1 == r { print $2 }' "$tmp/base.txt")
      echo "$P $zero $rank $state $peak $rss $base $act_forward $act_backward" >> "$results"
    done
  done
}

# The activation count against a measurement at a small size: the same
# model at one process with two batches, so that everything but the
# activations cancels in the difference of the peak RSS.
check_activations() {
  local l=2 h=4 c=128 t=64 small=4 large=12 rss_small rss_large
  run_train "$tmp/check.jsonl" 1 0 --layers $l --heads $h --width $c --seq $t --batch $small
  rss_small=$(per_rank_figures "$tmp/check.jsonl" | awk '{ print $4 }')
  run_train "$tmp/check.jsonl" 1 0 --layers $l --heads $h --width $c --seq $t --batch $large
  rss_large=$(per_rank_figures "$tmp/check.jsonl" | awk '{ print $4 }')
  "$py" - "$rss_small" "$rss_large" $small $large "--layers $l --heads $h --width $c --seq $t" \
    "$(activation_bytes $l $h $c $t $V $small)" "$(activation_bytes $l $h $c $t $V $large)" <<'EOF'
import sys
rss_small, rss_large, small, large, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
predicted = [sum(map(int, a.split())) for a in sys.argv[6:8]]
measured = rss_large - rss_small
mib = lambda x: f"{x / 2**20:.2f}"
print(f"Activation check ({model}, one process, --batch {small} and {large}): the peak RSS grows by "
      f"{mib(measured)} MiB, the count predicts {mib(predicted[1] - predicted[0])} MiB "
      f"({mib(predicted[0])} and {mib(predicted[1])} MiB of activations): measured / predicted = "
      f"{measured / (predicted[1] - predicted[0]):.3f}.")
EOF
}

# The Markdown table and the goals, from $results.
print_report() {
  "$py" - "$results" "$B" "$T" "$worlds" <<'EOF'
import sys
from collections import defaultdict
path, B, T, worlds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
rows = [list(map(int, line.split())) for line in open(path) if line.strip()]
mib = lambda x: f"{x / 2**20:.1f}"
name = lambda P, zero: "one process" if P == 1 else ("DDP" if zero == 0 else f"ZeRO-{zero}")
rss = {(P, zero, rank): r for P, zero, rank, _, _, r, *_ in rows}
print("| P | mode | rank | model state | in-step extra | activations (fwd + bwd) | base | prediction |"
      " in-step peak | peak RSS | RSS / prediction | RSS − prediction | RSS / DDP |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
ratio_to_prediction = []
for P, zero, rank, state, peak, r, base, fwd, bwd in rows:
    prediction = peak + fwd + bwd + base  # = state + (peak - state) + activations + base
    ratio_to_prediction.append((r / prediction, P, zero, rank))
    ddp = rss.get((P, 0, rank))
    to_ddp = f"{r / ddp:.2f}" if ddp and P > 1 else "–"
    print(f"| {P} | {name(P, zero)} | {rank} | {mib(state)} | {mib(peak - state)} | {mib(fwd + bwd)} "
          f"({mib(fwd)} + {mib(bwd)}) | {mib(base)} | {mib(prediction)} | {mib(peak)} | {mib(r)} | "
          f"{r / prediction:.2f} | {mib(r - prediction)} | {to_ddp} |")
print()
print(f"MiB per rank. prediction = model state + in-step extra + activations + base; in-step peak ="
      f" model state + in-step extra (peak_state_bytes); activations for B/P rows of {T} tokens"
      f" (global batch {B}); RSS / DDP: this rank's peak RSS over DDP's same rank at this P.")
print()

def worst(P, zero):  # the largest rank's RSS, or None when not run
    mine = [v for (p, z, _), v in rss.items() if p == P and z == zero]
    return max(mine) if mine else None

def verdict(ok):
    return "not measured" if ok is None else ("PASS" if ok else "MISS")

print("Goals:")
for zero, goal in [(1, 0.80), (2, 0.62), (3, 0.47)]:
    stage, ddp = worst(4, zero), worst(4, 0)
    ok = None if stage is None or ddp is None else stage <= goal * ddp
    got = "" if ok is None else f" (got {stage / ddp:.2f}x)"
    print(f"- at P=4, ZeRO-{zero} peak RSS <= {goal:.2f}x DDP's{got}: {verdict(ok)}")
over = [t for t in ratio_to_prediction if t[0] > 1.10]
if ratio_to_prediction:
    top = max(ratio_to_prediction)
    detail = (f"worst {top[0]:.2f}x at P={top[1]} {name(top[1], top[2])} rank {top[3]}; "
              f"{len(over)} of {len(ratio_to_prediction)} ranks above")
    print(f"- each rank's peak RSS <= 1.10x its prediction ({detail}): {verdict(not over)}")
else:
    print(f"- each rank's peak RSS <= 1.10x its prediction: {verdict(None)}")
one = [(r, state) for P, zero, rank, state, _, r, *_ in rows if P == 1]
if one:
    r, state = one[0]
    print(f"- one process peak RSS <= 1.45x its model state (got {r / state:.2f}x): {verdict(r <= 1.45 * state)}")
else:
    print(f"- one process peak RSS <= 1.45x its model state: {verdict(None)}")
at4, at8 = worst(4, 3), worst(8, 3)
ok = None if at4 is None or at8 is None else at8 < at4
got = "" if ok is None else f" (got {mib(at4)} -> {mib(at8)} MiB)"
print(f"- ZeRO-3 peak RSS falls from P=4 to P=8{got}: {verdict(ok)}")
EOF
}

command_line() {
  local env=""
  for v in LAYERS HEADS WIDTH SEQ BATCH STEPS WORLDS DATA CHECK; do
    if [ -n "${!v:-}" ]; then env+="$v='${!v}' "; fi
  done
  echo "${env}bench/memory.sh $build"
}

n=$("$tinyllm" memory --world 1 --layers "$L" --heads "$H" --width "$C" --seq "$T" | sed -n 's/.*n = \([0-9]*\) parameters.*/\1/p')
echo "Command: \`$(command_line)\` — L=$L H=$H C=$C T=$T, vocab $V, n = $n parameters, float64, AdamW," \
  "global batch $B, $S steps, backend procs, data $data, $cores cores, $(($(available_bytes) >> 20)) MiB available" \
  "at the start, load $(cut -d' ' -f1-3 /proc/loadavg)."
echo
for P in 1 $worlds; do
  if [ "$P" != 1 ] || [ -z "${one_done:-}" ]; then measure_world "$P"; fi
  one_done=1
done
print_report
if [ "${CHECK:-1}" != 0 ]; then
  echo
  check_activations
fi
