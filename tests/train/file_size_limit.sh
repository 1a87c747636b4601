#!/usr/bin/env bash
# A save under a file size limit (`ulimit -f 100`, 100 blocks of 512 bytes)
# where the checkpoint is larger: a clear error with EFBIG's text, no
# temporary left, and the previous checkpoint intact and loadable, rather
# than a silent death by SIGXFSZ.
# Usage: file_size_limit.sh WORKDIR TINYLLM
set -uo pipefail
work=$1 tinyllm=$2
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
run=(--layers 1 --heads 2 --width 32 --seq 8 --batch 4 --val-fraction 0)  # about 155 KB a checkpoint
"$tinyllm" train "${run[@]}" --steps 1 --save "$work/dir" >/dev/null || exit 1
cp "$work/dir/step-00000001.safetensors" "$work/before.safetensors"
out=$(sh -c 'ulimit -f 100; exec "$@"' sh "$tinyllm" train "${run[@]}" --steps 2 --resume "$work/dir" \
  --save "$work/dir" 2>&1)
rc=$?
expected="tinyllm: error: rank 0: checkpoint '$work/dir/step-00000002.safetensors': cannot write the temporary file"
if [[ $rc -ne 1 || "$out" != *"$expected"*"File too large"* ]]; then
  echo "exit status $rc, output: $out"$'\n'"expected: $expected ... File too large"
  exit 1
fi
if ls "$work/dir" | grep -q '\.tmp$'; then
  echo "a temporary was left:" && ls -a "$work/dir"
  exit 1
fi
cmp "$work/dir/step-00000001.safetensors" "$work/before.safetensors" || exit 1
"$tinyllm" diff "$work/dir/step-00000001.safetensors" "$work/before.safetensors" || exit 1
echo "refused with EFBIG; the previous checkpoint is intact"
