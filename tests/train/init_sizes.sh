#!/usr/bin/env bash
# With --init or --resume, each model size the command line leaves out is
# the checkpoint's: one size given (the same as the checkpoint's) keeps the
# others, and one that differs is refused naming both models.
# Usage: init_sizes.sh DIR TINYLLM
set -uo pipefail
dir=$1 tinyllm=$2
rm -rf "$dir" && mkdir -p "$dir"
fail() {
  echo "$*"
  exit 1
}
"$tinyllm" train --layers 1 --heads 2 --width 16 --seq 16 --batch 2 --steps 1 --save "$dir/a" > /dev/null ||
  fail "the first run failed"
out=$("$tinyllm" train --init "$dir/a" --seq 16 --batch 2 --steps 1 2>&1) ||
  fail "--init with one size given failed: $out"
[[ $out == *"L=1 H=2 C=16 T=16"* ]] || fail "--init --seq 16 did not keep the checkpoint's sizes: $out"
out=$("$tinyllm" train --resume "$dir/a" --layers 1 --steps 2 2>&1) || fail "--resume with one size given failed: $out"
out=$("$tinyllm" train --init "$dir/a" --seq 8 --batch 2 --steps 1 2>&1)
[[ $? == 1 && $out == *"holds a model of --layers 1 --heads 2 --width 16 --seq 16 (vocab 256), the run asks for --layers 1 --heads 2 --width 16 --seq 8"* ]] ||
  fail "--init --seq 8 was not refused naming both models: $out"
echo "init sizes passed"
