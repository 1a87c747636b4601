#!/usr/bin/env bash
# Two trainers saving into one directory at once: while a run on 2 procs
# ranks trains into DIR, a second run into DIR refuses, naming the first's
# pid (the parent's, which holds the lock), and writes nothing; once the
# first is killed (SIGKILL: no cleanup) the kernel has released the lock,
# and a run with --overwrite saves into DIR.
# Usage: save_lock.sh WORKDIR TINYLLM
set -uo pipefail
work=$1 tinyllm=$2
rm -rf "$work" && mkdir -p "$work"
run=(--layers 1 --heads 2 --width 16 --seq 8 --batch 24 --val-fraction 0)
"$tinyllm" train "${run[@]}" --world 2 --backend procs --steps 1000000 --save "$work/dir" >"$work/first.log" 2>&1 &
first=$!
trap 'kill -9 "$first" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  grep -q "^step" "$work/first.log" && break
  sleep 0.1
done
second=$("$tinyllm" train "${run[@]}" --steps 1 --save "$work/dir" 2>&1)
expected="tinyllm: error: --save directory '$work/dir' is in use by another tinyllm run (pid $first)"
if [[ "$second" != *"$expected"* ]]; then
  echo "second run said: $second"$'\n'"expected: $expected"
  exit 1
fi
if ls "$work/dir" | grep -q safetensors; then
  echo "the refused run wrote into the directory:" && ls -a "$work/dir"
  exit 1
fi
kill -9 "$first" && wait "$first" 2>/dev/null
"$tinyllm" train "${run[@]}" --steps 1 --save "$work/dir" --overwrite >"$work/third.log" 2>&1 ||
  { cat "$work/third.log"; exit 1; }
[[ -f "$work/dir/step-00000001.safetensors" && ! -e "$work/dir/.tinyllm.lock" ]] ||
  { echo "after the third run:" && ls -a "$work/dir"; exit 1; }
echo "refused while in use; saved after the holder died"
