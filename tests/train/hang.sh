#!/usr/bin/env bash
# A rank that hangs (SIGSTOP) must end the whole run within the timeout plus
# a margin, with a message naming the collective, and leave no process
# behind. Starts `COMMAND... train --timeout SECONDS` (tinyllm under mpirun,
# or `tinyllm train --backend procs`), waits until the run is training,
# stops rank STOP, then times how long the others take to end the job.
# Usage: hang.sh SECONDS MARGIN STOP REGEX COMMAND... (SECONDS, MARGIN whole)
set -uo pipefail
timeout=$1 margin=$2 stop=$3 regex=$4
shift 4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" --timeout "$timeout" --steps 1000000 --layers 1 --heads 2 --width 16 --seq 8 --batch 24 >"$out" 2>&1 &
job=$!

# The ranks are the job's children: under mpirun (which starts this
# machine's ranks itself) the one whose OMPI_COMM_WORLD_RANK is STOP, under
# procs the forked children in rank order (by pid).
children() { cat /proc/"$job"/task/*/children 2>/dev/null | tr ' ' '\n' | grep .; }
rank_pid() {
  local pid
  for pid in $(children); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$stop"; then
      echo "$pid"
      return
    fi
  done
  children | sort -n | sed -n "$((stop + 1))p"
}
for _ in $(seq 600); do
  grep -q "step  *20/" "$out" && break
  sleep 0.1
done
victim=$(rank_pid)
if [ -z "$victim" ] || ! grep -q "step  *20/" "$out"; then
  cat "$out"
  echo "hang.sh: the run never reached step 20 (rank $stop: '${victim}')"
  kill -KILL "$job" 2>/dev/null
  exit 1
fi
kill -STOP "$victim"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
stopped=$(now_ms)
bound=$(((timeout + margin) * 1000))
for _ in $(seq $((bound / 100 + 50))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
wait "$job" 2>/dev/null
status=$?
took=$(($(now_ms) - stopped))
tail -n 5 "$out"
echo "hang.sh: stopped rank $stop (pid $victim); the job ended with status $status after $took ms (bound $bound ms)"
# The launcher kills the stopped rank as it ends; give the kill a moment to
# land (a zombie left to a container's init counts as gone).
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
for _ in $(seq 30); do
  alive "$victim" || break
  sleep 0.1
done
fail=0
if alive "$victim"; then
  echo "hang.sh: the stopped rank outlived the job"
  kill -KILL "$victim"
  fail=1
fi
[ "$status" -ne 0 ] || { echo "hang.sh: the job exited 0"; fail=1; }
[ "$took" -le "$bound" ] || { echo "hang.sh: took longer than $bound ms"; fail=1; }
grep -Eq -- "$regex" "$out" || { echo "hang.sh: no line matches '$regex'"; fail=1; }
exit $fail
