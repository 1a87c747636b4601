#!/usr/bin/env bash
# A run that runs out of memory ends with an error, never an abort: past
# the memory check (--no-memory-check), under a sweep of `ulimit -v` limits
# on BACKEND, every run either finishes (0) or exits 1 with one message
# naming the rank, what could not be allocated, the phase and the
# prediction; at least one limit must run out, so that the test is not
# vacuous. The checkpoint the run resumed from stays valid.
# Usage: out_of_memory.sh DIR TINYLLM BACKEND [MPIRUN...]
set -uo pipefail
# OpenBLAS's worker threads map their memory (some 128 MiB) at a moment that
# races the check's reading of what the process maps; one thread, no race.
export OPENBLAS_NUM_THREADS=1
dir=$1 tinyllm=$2 backend=$3
shift 3
mpirun=("$@")
rm -rf "$dir" && mkdir -p "$dir"
model=(--layers 40 --world 2 --batch 16)

fail() {
  echo "$*"
  exit 1
}

# run LIMIT ARGS...: tinyllm train's ranks under `ulimit -v LIMIT`.
run() {
  local limit=$1
  shift
  if [[ $backend == mpi ]]; then
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${mpirun[@]}" -n 2 \
      bash -c "ulimit -v $limit; exec \"\$0\" \"\$@\"" "$tinyllm" train "$@" --backend mpi
  else
    bash -c "ulimit -v $limit; exec \"\$0\" \"\$@\"" "$tinyllm" train "$@" --backend "$backend"
  fi
}

"$tinyllm" train "${model[@]}" --steps 1 --save "$dir/run" --backend "${backend/mpi/threads}" > "$dir/first.log" 2>&1 ||
  fail "the first run failed: $(cat "$dir/first.log")"
checkpoint=$dir/run/step-00000001.safetensors
[[ -f $checkpoint ]] || fail "no checkpoint $checkpoint"
before=$(sha256sum < "$checkpoint")

ran_out=0
for limit in 700000 900000 1100000 1300000 1600000 2000000 2600000; do
  out=$(run "$limit" "${model[@]}" --steps 3 --resume "$dir/run" --no-memory-check 2>&1)
  rc=$?
  if [[ $out == *"terminate called"* || $out == *"Aborted"* || $out == *"core dumped"* ]]; then
    fail "ulimit -v $limit: an abort (exit status $rc): $out"
  fi
  case $rc in
    0) ;;
    1)
      [[ $out =~ tinyllm:\ error:\ rank\ [0-9]+:\ out\ of\ memory.*\(during\ [a-z\ ,0-9]+\)\;\ the\ memory\ check\ was\ off ]] ||
        fail "ulimit -v $limit: exit status 1 without the out-of-memory message: $out"
      ran_out=$((ran_out + 1))
      echo "ulimit -v $limit: $(grep -o 'rank [0-9]*: out of memory[^;]*' <<< "$out" | head -1)"
      ;;
    *) fail "ulimit -v $limit: exit status $rc: $out" ;;
  esac
done
[[ $ran_out -gt 0 ]] || fail "no limit ran out of memory: the test is vacuous"
[[ $(sha256sum < "$checkpoint") == "$before" ]] || fail "the checkpoint resumed from changed"
"$tinyllm" diff "$checkpoint" "$checkpoint" --tolerance 0 > /dev/null || fail "the checkpoint no longer loads"
echo "out of memory passed ($ran_out limits ran out, on $backend)"
