#!/usr/bin/env bash
# --bitwise end to end: checkpoints of runs at other world sizes, stages,
# --grad-accum, --overlap and backends (threads, procs, and mpirun when given) are
# the same bits, `tinyllm diff --tolerance 0` says so, and so is a run
# resumed at another world size, from a bitwise or a default checkpoint.
# Without --bitwise the same pair of runs differs, so the check can fail.
# Usage: bitwise.sh WORKDIR TINYLLM [MPIRUN [mpirun flags...]]
set -uo pipefail
work=$1 tinyllm=$2
shift 2
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
fail() { echo "bitwise failed: $*"; exit 1; }
# --decay-steps: the schedule of a 4-step run, also for the runs of 2.
run=(--layers 2 --heads 2 --width 16 --seq 8 --batch 24 --clip 0.01 --decay-steps 4)
train() { "$tinyllm" train "${run[@]}" "$@" >/dev/null || fail "train $*"; }
same() {
  local out
  out=$("$tinyllm" diff "$1" "$2" --tolerance 0 2>&1) || fail "$1 and $2 differ: $out"
  grep -q "parameters 0.000e+00, exp_avg 0.000e+00, exp_avg_sq 0.000e+00" <<<"$out" || fail "$out"
}

train --bitwise --steps 4 --world 1 --save "$work/one"
train --bitwise --steps 4 --world 4 --backend threads --save "$work/threads4"
train --bitwise --steps 4 --world 3 --backend procs --zero 3 --grad-accum 2 --overlap --save "$work/procs3"
train --bitwise --steps 4 --world 6 --backend procs --zero 1 --save "$work/procs6"
same "$work/one" "$work/threads4"
same "$work/threads4" "$work/procs3"
same "$work/one" "$work/procs6"

# Resumed at another world size and stage: 2 steps on 2 ranks, 2 more on 3.
train --bitwise --steps 2 --world 2 --zero 2 --save "$work/half"
train --bitwise --steps 4 --world 3 --resume "$work/half" --save "$work/resumed"
same "$work/one" "$work/resumed"

# A default-mode checkpoint resumed with --bitwise: from there on, the same
# bits at any world size (not those of a run bitwise from the start).
train --steps 2 --world 4 --save "$work/default"
train --bitwise --steps 4 --world 1 --resume "$work/default" --save "$work/mixed1"
train --bitwise --steps 4 --world 4 --zero 3 --backend procs --resume "$work/default" --save "$work/mixed4"
same "$work/mixed1" "$work/mixed4"

if (($# > 0)); then
  # detect_leaks=0: Open MPI's own leaks, under AddressSanitizer.
  ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@" -n 2 --mca pml ob1 --mca btl tcp,self \
    "$tinyllm" train "${run[@]}" --bitwise --steps 4 --zero 2 --timeout 10 --save "$work/mpi" >/dev/null ||
    fail "mpirun"
  same "$work/one" "$work/mpi"
fi

# Not vacuous: without --bitwise, 4 threads and 3 processes differ.
train --steps 4 --world 4 --backend threads --save "$work/threads4_default"
train --steps 4 --world 3 --backend procs --save "$work/procs3_default"
if "$tinyllm" diff "$work/threads4_default" "$work/procs3_default" --tolerance 0 >/dev/null 2>&1; then
  fail "without --bitwise, 4 threads and 3 processes gave the same bits: the check above proves nothing"
fi
echo "bitwise passed"
