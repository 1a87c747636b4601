#!/usr/bin/env bash
# A rank that hangs (SIGSTOP) or dies (SIGKILL) must end the whole run
# within the timeout plus a margin, with a message naming the collective or
# the death, and leave no process and no shared segment behind. Starts
# `COMMAND... train --timeout SECONDS` (tinyllm under mpirun, or `tinyllm
# train --backend procs`), waits until the run is training, sends SIGNAL to
# rank RANK, then times how long the others take to end the job.
# Usage: hang.sh SIGNAL SECONDS MARGIN RANK REGEX COMMAND... (SECONDS, MARGIN whole)
set -uo pipefail
signal=$1 timeout=$2 margin=$3 rank=$4 regex=$5
shift 5
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" --timeout "$timeout" --steps 1000000 --layers 1 --heads 2 --width 16 --seq 8 --batch 24 >"$out" 2>&1 &
job=$!

# The ranks are the job's children: under mpirun (which starts this
# machine's ranks itself) the one whose OMPI_COMM_WORLD_RANK is RANK, under
# procs the forked children in rank order (by pid).
children() { cat /proc/"$job"/task/*/children 2>/dev/null | tr ' ' '\n' | grep .; }
rank_pid() {
  local pid
  for pid in $(children); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      echo "$pid"
      return
    fi
  done
  children | sort -n | sed -n "$((rank + 1))p"
}
for _ in $(seq 600); do
  grep -q "step  *20/" "$out" && break
  sleep 0.1
done
victim=$(rank_pid)
ranks=$(children)
if [ -z "$victim" ] || ! grep -q "step  *20/" "$out"; then
  cat "$out"
  echo "hang.sh: the run never reached step 20 (rank $rank: '${victim}')"
  kill -KILL "$job" 2>/dev/null
  exit 1
fi
kill -"$signal" "$victim"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
signalled=$(now_ms)
bound=$(((timeout + margin) * 1000))
for _ in $(seq $((bound / 100 + 50))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
wait "$job" 2>/dev/null
status=$?
took=$(($(now_ms) - signalled))
tail -n 5 "$out"
echo "hang.sh: SIG$signal to rank $rank (pid $victim); the job ended with status $status after $took ms (bound $bound ms)"
# The launcher kills a stopped rank as it ends; give the kills a moment to
# land (a zombie left to a container's init counts as gone).
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
for _ in $(seq 30); do
  left=$(for pid in $ranks; do alive "$pid" && echo "$pid"; done)
  [ -n "$left" ] || break
  sleep 0.1
done
fail=0
if [ -n "$left" ]; then
  echo "hang.sh: rank processes outlived the job: $left"
  kill -KILL $left
  fail=1
fi
# Segments are named for the process that made them (the procs launcher):
# the job's and its ranks' only, as a second suite beside this one makes its own.
for pid in $job $ranks; do
  if compgen -G "/dev/shm/tinyllm-$pid-*" >/dev/null; then
    echo "hang.sh: a shared segment of pid $pid was left in /dev/shm"
    fail=1
  fi
done
[ "$status" -ne 0 ] || { echo "hang.sh: the job exited 0"; fail=1; }
[ "$took" -le "$bound" ] || { echo "hang.sh: took longer than $bound ms"; fail=1; }
grep -Eq -- "$regex" "$out" || { echo "hang.sh: no line matches '$regex'"; fail=1; }
exit $fail
