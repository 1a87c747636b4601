#!/usr/bin/env bash
# --resume on another corpus: a run of 2 steps saved on GPL-3; resuming it
# on a shorter file, or on GPL-3 cut at another --val-fraction, ends with
# status 1 naming both fingerprints and writes no step; --allow-other-data
# resumes with a one-line warning; the run's own corpus resumes silently,
# at the checkpoint's --val-fraction unless told another.
# Usage: other_data.sh WORKDIR TINYLLM
set -uo pipefail
work=$1 tinyllm=$2
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
fail() { echo "other_data failed: $*"; exit 1; }
run=(--layers 1 --heads 2 --width 16 --seq 8 --batch 4)
"$tinyllm" train "${run[@]}" --steps 2 --save "$work/a" >/dev/null || fail "the first run"
head -c 1000 /usr/share/common-licenses/GPL-3 >"$work/other.txt"
ckpt="$work/a/step-00000002.safetensors"
trained="checkpoint '$ckpt' was trained on [0-9]+ tokens with FNV-1a [0-9a-f]{16} \(the training part at --val-fraction 0\.1\), but --data"
hint="; pass --data with the run's corpus \(and its --val-fraction\), or --allow-other-data to continue on it$"

out=$("$tinyllm" train --resume "$work/a" --data "$work/other.txt" --steps 3 --save "$work/a" 2>&1)
[[ $? == 1 ]] || fail "another file: exit status not 1: $out"
grep -Eq "^tinyllm: error: $trained '$work/other.txt' at --val-fraction 0\.1 gives 900 tokens with FNV-1a [0-9a-f]{16}$hint" <<<"$out" ||
  fail "another file: $out"
out=$("$tinyllm" train --resume "$work/a" --val-fraction 0.2 --steps 3 --save "$work/a" 2>&1)
[[ $? == 1 ]] || fail "another --val-fraction: exit status not 1: $out"
grep -Eq "^tinyllm: error: $trained '/usr/share/common-licenses/GPL-3' at --val-fraction 0\.2 gives [0-9]+ tokens" <<<"$out" ||
  fail "another --val-fraction: $out"
[[ ! -e $work/a/step-00000003.safetensors ]] || fail "a refused run saved a step"

out=$("$tinyllm" train --resume "$work/a" --data "$work/other.txt" --allow-other-data --steps 3 2>&1 >/dev/null)
[[ $? == 0 ]] || fail "--allow-other-data: $out"
[[ $(wc -l <<<"$out") == 1 ]] && grep -Eq "^tinyllm: warning: $trained '$work/other.txt' .*; continuing on it \(--allow-other-data\)$" <<<"$out" ||
  fail "--allow-other-data's warning: $out"
out=$("$tinyllm" train --resume "$work/a" --steps 3 2>&1 >/dev/null)
[[ $? == 0 && -z $out ]] || fail "the run's own corpus: $out"
# Unless given, --resume takes the checkpoint's --val-fraction, as its --batch and --seed.
"$tinyllm" train "${run[@]}" --val-fraction 0.2 --steps 2 --save "$work/b" >/dev/null || fail "the run at 0.2"
out=$("$tinyllm" train --resume "$work/b" --steps 3 2>&1 >/dev/null)
[[ $? == 0 && -z $out ]] || fail "the checkpoint's --val-fraction: $out"
echo "other_data passed"
