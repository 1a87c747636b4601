#!/usr/bin/env bash
# Standard output: every command whose output cannot be written (a full
# disk: /dev/full) exits 1 saying so, never 0; sample streams its bytes as
# they are drawn, so that a long sample shows (and keeps, on Ctrl-C) what
# it has. Usage: stdout.sh DIR TINYLLM
set -uo pipefail
dir=$1 tinyllm=$2
rm -rf "$dir" && mkdir -p "$dir"
tiny=(--layers 1 --heads 1 --width 16 --seq 8 --batch 4)
fail() {
  echo "$*"
  exit 1
}
"$tinyllm" train "${tiny[@]}" --steps 1 --save "$dir/run" > /dev/null || fail "the first run failed"

for command in "sample $dir/run --tokens 5" "memory" "diff $dir/run $dir/run" "train ${tiny[*]} --steps 1" \
  "verify ${tiny[*]} --steps 1 --world 2"; do
  # shellcheck disable=SC2086
  err=$("$tinyllm" $command 2>&1 > /dev/full)
  rc=$?
  [[ $rc == 1 && $err == *"standard output cannot be written: No space left on device"* ]] ||
    fail "tinyllm $command > /dev/full: exit status $rc, stderr: $err"
done

# A sample of a hundred million bytes, stopped after 5 s: what was drawn by
# then is out (the first byte takes milliseconds).
timeout 5 "$tinyllm" sample "$dir/run" --tokens 100000000 > "$dir/stream.txt" 2> /dev/null
[[ $(wc -c < "$dir/stream.txt") -gt 100 ]] || fail "sample printed $(wc -c < "$dir/stream.txt") bytes in 5 s"
echo "stdout passed"
