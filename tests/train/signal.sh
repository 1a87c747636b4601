#!/usr/bin/env bash
# SIGINT or SIGTERM to a training parent: the whole run ends within 2 s with
# the shell's status for the signal (130, 143), after saving the step it
# was in, and leaves no rank process, no temporary checkpoint file, and a
# --save directory whose latest checkpoint is that step's and loads.
# After `--`, a LAUNCHER (mpirun -n 2) starts the ranks, and the signal goes
# to them: Open MPI's mpirun takes SIGINT and SIGTERM as an abort, stops
# relaying the ranks' output and kills them 1 s later, so a user stops such
# a run by signalling its ranks. mpirun then ends the job with the first
# rank's status, 1.1-2.7 s after the signal on two busy cores: 10 s bound it,
# near 4 times the slowest seen and far inside the 60 s collective timeout a
# run that failed to stop would wait out. Without a launcher the run ends in
# 50-180 ms, alone or beside a second suite: 2 s bound it.
# Usage: signal.sh SIGNAL STATUS DIR TINYLLM [TRAIN FLAGS...] [-- LAUNCHER...]
set -uo pipefail
signal=$1 expected=$2 dir=$3 tinyllm=$4
shift 4
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  flags+=("$1")
  shift
done
[ $# -gt 0 ] && shift
launcher=("$@")
bound=2000
[ ${#launcher[@]} -eq 0 ] || bound=10000
rm -rf "$dir"
mkdir -p "$dir"
out="$dir.log"
"${launcher[@]}" "$tinyllm" train "${flags[@]}" --steps 1000000 --layers 1 --heads 2 --width 16 --seq 8 --batch 24 \
  --save "$dir" --save-every 10 >"$out" 2>&1 &
job=$!

descendants() {
  local pid
  for pid in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$pid"
    descendants "$pid"
  done
}
for _ in $(seq 600); do
  grep -q "step  *25/" "$out" && break
  sleep 0.1
done
if ! grep -q "step  *25/" "$out"; then
  cat "$out"
  echo "signal.sh: the run never reached step 25"
  kill -KILL "$job" 2>/dev/null
  exit 1
fi
ranks=$(descendants "$job")
targets=$job
[ ${#launcher[@]} -eq 0 ] || targets=$(cat /proc/"$job"/task/*/children)
now_ms() { echo $(($(date +%s%N) / 1000000)); }
sent=$(now_ms)
kill -"$signal" $targets
for _ in $(seq $((bound / 50))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
wait "$job" 2>/dev/null
status=$?
took=$(($(now_ms) - sent))
tail -n 3 "$out"
echo "signal.sh: SIG$signal ended the run with status $status after $took ms (ranks: ${ranks:-none beside the parent})"

fail=0
[ "$status" -eq "$expected" ] || { echo "signal.sh: status $status, expected $expected"; fail=1; }
[ "$took" -le "$bound" ] || { echo "signal.sh: took longer than $bound ms"; fail=1; }
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
sleep 0.2  # the ranks' parent-death signal, in flight
for pid in $ranks; do
  if alive "$pid"; then
    echo "signal.sh: rank process $pid outlived the run"
    kill -KILL "$pid"
    fail=1
  fi
done
leftovers=$(find "$dir" -name '*.tmp')
[ -z "$leftovers" ] || { echo "signal.sh: temporaries left: $leftovers"; fail=1; }
if ! "$tinyllm" sample "$dir" --tokens 4 >/dev/null; then
  echo "signal.sh: the latest checkpoint in $dir does not load"
  fail=1
fi
last=$(sed -n 's/.*stopped by signal .* after step \([0-9]*\), saved to \(.*\)$/\2/p' "$out")
latest=$(find "$dir" -name 'step-*.safetensors' | sort | tail -n 1)
[ -n "$last" ] && [ "$last" = "$latest" ] || { echo "signal.sh: no final checkpoint ('$last', latest '$latest')"; fail=1; }
[ "$fail" -eq 0 ] && echo "signal passed"
exit $fail
