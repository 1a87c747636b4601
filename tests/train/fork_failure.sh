#!/usr/bin/env bash
# A rank the procs launcher cannot fork: the run ends within 5 s with status
# 1 and a message naming the rank and fork's error, leaving no rank process
# and no shared segment. Fork fails for real: the run is nobody's, under a
# process limit (RLIMIT_NPROC, counted over all of nobody's threads) that
# lets the first few of 16 ranks start. Needs root and setpriv; exits 77
# (skipped) without them.
# Usage: fork_failure.sh TINYLLM
set -uo pipefail
tinyllm=$1
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
  echo "fork_failure.sh: needs root, setpriv and a user nobody; skipped"
  exit 77
fi
# nobody may not reach the build tree, so the binary and corpus are copied.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$tinyllm" "$dir/tinyllm"
cp /usr/share/common-licenses/GPL-3 "$dir/corpus.txt"
chmod 755 "$dir" "$dir/tinyllm"
chmod 644 "$dir/corpus.txt"

# The run's pid, which names its shared segments (bash execs tinyllm).
touch "$dir/pid" && chmod 666 "$dir/pid"
# The parent and three ranks fit beside the threads nobody runs already
# (RLIMIT_NPROC counts by real user).
limit=$(($(ps -L -U nobody --no-headers 2>/dev/null | wc -l) + 4))
now_ms() { echo $(($(date +%s%N) / 1000000)); }
started=$(now_ms)
out=$(OPENBLAS_NUM_THREADS=1 timeout 30 setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
  bash -c "echo \$\$ > $dir/pid && ulimit -u $limit && exec $dir/tinyllm train --world 16 --backend procs --data $dir/corpus.txt \
    --steps 2 --layers 1 --heads 2 --width 16 --seq 8 --batch 16" 2>&1)
status=$?
took=$(($(now_ms) - started))
echo "$out" | tail -n 3
echo "fork_failure.sh: under ulimit -u $limit the run ended with status $status after $took ms"

fail=0
[ "$status" -eq 1 ] || { echo "fork_failure.sh: status $status, expected 1"; fail=1; }
[ "$took" -le 5000 ] || { echo "fork_failure.sh: took longer than 5000 ms"; fail=1; }
regex='tinyllm: error: rank [0-9]+: could not be started: fork failed: Resource temporarily unavailable'
echo "$out" | grep -Eq "$regex" || { echo "fork_failure.sh: no line matches '$regex'"; fail=1; }
sleep 0.2  # the ranks' parent-death signal, in flight
if left=$(pgrep -u nobody -f "$dir/tinyllm"); then
  echo "fork_failure.sh: rank processes outlived the run: $left"
  kill -KILL $left
  fail=1
fi
pid=$(cat "$dir/pid")
[[ -n $pid ]] || { echo "fork_failure.sh: the run's pid was not recorded"; fail=1; }
if compgen -G "/dev/shm/tinyllm-$pid-*" >/dev/null; then
  echo "fork_failure.sh: a shared segment of the run (pid $pid) was left in /dev/shm"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "fork failure passed"
exit $fail
