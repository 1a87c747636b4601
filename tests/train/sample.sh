#!/usr/bin/env bash
# `tinyllm sample` end to end: a model trained on a repeated phrase, saved
# by one process and by two ranks at ZeRO-3, continues the phrase greedily;
# both checkpoints give the same bytes for a seed, and another seed others;
# a prompt longer than the context continues like its last block_size bytes;
# a safetensors file that is not a checkpoint is refused, naming it.
# Usage: sample.sh WORKDIR TINYLLM
set -euo pipefail
work=$1 tinyllm=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "sample.sh: $*" >&2; exit 1; }

phrase="tinyllm samples! "
for _ in $(seq 100); do printf '%s' "$phrase"; done >"$work/corpus.txt"
run=(--data "$work/corpus.txt" --layers 2 --heads 2 --width 16 --seq 8 --batch 24 --steps 150 --lr 1e-2)
"$tinyllm" train "${run[@]}" --world 1 --save "$work/one" >/dev/null
"$tinyllm" train "${run[@]}" --world 2 --zero 3 --save "$work/zero3" >/dev/null

greedy=$("$tinyllm" sample "$work/one" --prompt "tinyllm " --tokens 42 --top-k 1 2>/dev/null)
[[ $greedy == "$phrase$phrase${phrase% }" ]] || fail "greedy sample '$greedy' does not continue the phrase"

draw=(--samples 3 --tokens 60 --temperature 2)
"$tinyllm" sample "$work/one" "${draw[@]}" --seed 5 >"$work/one.txt" 2>/dev/null
"$tinyllm" sample "$work/zero3" "${draw[@]}" --seed 5 >"$work/zero3.txt" 2>/dev/null
"$tinyllm" sample "$work/one" "${draw[@]}" --seed 6 >"$work/other.txt" 2>/dev/null
cmp "$work/one.txt" "$work/zero3.txt" || fail "the two checkpoints sample different bytes for one seed"
! cmp -s "$work/one.txt" "$work/other.txt" || fail "seeds 5 and 6 sample the same bytes"
[[ $(grep -c -x -- --------------- "$work/one.txt") == 2 ]] || fail "3 samples need 2 separator lines"

long=$("$tinyllm" sample "$work/one" --prompt "abcdefgh tinyllm " --tokens 20 --seed 3 2>"$work/long.err")
short=$("$tinyllm" sample "$work/one" --prompt "tinyllm " --tokens 20 --seed 3 2>/dev/null)
grep -q "the prompt's 17 bytes exceed the model's context: it continues from the last 8" "$work/long.err" ||
  fail "no word on stderr of the cropped prompt"
[[ $long == "abcdefgh $short" ]] || fail "the long prompt's continuation '$long' is not the short one's '$short'"

# A safetensors file of one tensor and no metadata.
header='{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}'
{ printf "\\$(printf '%03o' ${#header})\\0\\0\\0\\0\\0\\0\\0%s" "$header"; printf '\0\0\0\0\0\0\0\0'; } >"$work/x.safetensors"
if "$tinyllm" sample "$work/x.safetensors" 2>"$work/x.err"; then fail "sampled from a file that is not a checkpoint"; fi
grep -q "tinyllm: error: '$work/x.safetensors' is a safetensors file but not a tinyllm checkpoint" "$work/x.err" ||
  fail "unclear refusal: $(cat "$work/x.err")"

rm -rf "$work"
echo "sample passed"
