#!/usr/bin/env bash
# The memory check's prediction is an upper bound, on both sides of the
# limit. A model larger than the memory it may take is refused before any of
# it is built: exit status 1 within a few seconds, the message naming the
# need, how it splits and the limit, rather than an OOM kill (137) or an
# abort. Under `ulimit -v` it sets the limit itself, for train and verify on
# every backend: at a limit the need exceeds by 10% the run is refused, and
# at a limit 1.25 times the need (the need at 0.8 of it) it runs to the end.
# Usage: memory_limit.sh TINYLLM [no-ulimit] [MPIRUN...] (AddressSanitizer's
# shadow memory cannot be mapped under `ulimit -v`, so its build skips that
# half; without MPIRUN, the mpi backend is left out).
set -uo pipefail
# OpenBLAS's worker threads map their memory (some 128 MiB) at a moment that
# races the check's reading of what the process maps; one thread, no race.
export OPENBLAS_NUM_THREADS=1
tinyllm=$1 limits=${2:-ulimit}
shift 2 || shift $#
mpirun=("$@")

# refuses EXPECTED COMMAND...: the command fails with status 1, quickly, saying EXPECTED.
refuses() {
  local expected=$1 start out rc elapsed
  shift
  start=$(date +%s%N)
  out=$("$@" 2>&1)
  rc=$?
  elapsed=$((($(date +%s%N) - start) / 1000000))
  if [[ $rc -ne 1 || "$out" != *"$expected"* || $elapsed -gt 10000 ]]; then
    echo "$*: exit status $rc after $elapsed ms, output: $out"$'\n'"expected status 1 within 10 s and: $expected"
    exit 1
  fi
}

# 100000 blocks of width 128: some 600 GiB on one rank, beyond the machine.
refuses "tinyllm: error: --layers 100000 --heads 4 --width 128 --seq 64 (vocab 256) with --zero 0 on 1 rank needs up to " \
  "$tinyllm" train --layers 100000 --steps 1
refuses "GiB are available (MemAvailable in /proc/meminfo)" "$tinyllm" verify --layers 100000 --steps 1 --world 2

if [[ $limits == no-ulimit ]]; then
  echo "refused before building the model"
  exit 0
fi

# A size in KiB from the message's "12.3 MiB" or "1.2 GiB".
kib() {
  local number=$1 unit=$2
  awk -v n="$number" -v u="$unit" 'BEGIN { printf "%d", n * (u == "GiB" ? 1048576 : 1024) }'
}

# The KiB of address space a run needs by its refusal's message: per rank
# and its untouched mappings, times the ranks counted, plus what is held
# once, plus what the process mapped at the check.
need_kib() {
  local message=$1 per_rank unmapped=0 ranks once=0 mapped
  local size='([0-9.]+) (MiB|GiB)'
  [[ $message =~ needs\ up\ to\ $size\ per\ rank ]] || return 1
  per_rank=$(kib "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
  if [[ $message =~ and\ $size\ of\ address\ space ]]; then unmapped=$(kib "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"); fi
  [[ $message =~ \ x\ ([0-9]+)\ rank ]] || return 1
  ranks=${BASH_REMATCH[1]}
  if [[ $message =~ \ \+\ $size\ for\ verify ]]; then once=$(kib "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"); fi
  [[ $message =~ less\ the\ $size\ this\ process\ maps ]] || return 1
  mapped=$(kib "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
  echo $(((per_rank + unmapped) * ranks + once + mapped))
}

# under_limit KIB COMMAND...: COMMAND's ranks under `ulimit -v KIB`, mpirun's
# each in its own process.
under_limit() {
  local limit=$1
  shift
  if [[ $1 == mpi ]]; then
    shift
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${mpirun[@]}" -n 2 \
      bash -c "ulimit -v $limit; exec \"\$0\" \"\$@\"" "$tinyllm" "$@" --backend mpi
  else
    bash -c "ulimit -v $limit; exec \"\$0\" \"\$@\"" "$tinyllm" "$@"
  fi
}

# both_sides BACKEND COMMAND...: refused at 1/1.1 of its need, run at 1/0.8.
both_sides() {
  local backend=$1 out need refused fits rc
  shift
  local run=("$@")
  [[ $backend == mpi ]] && run=(mpi "$@") || run+=(--backend "$backend")
  out=$(under_limit 400000 "${run[@]}" 2>&1)
  need=$(need_kib "$out") || { echo "${run[*]} at 400000 KiB: no need in: $out"; exit 1; }
  refused=$((need * 10 / 11)) fits=$((need * 5 / 4))
  refuses "tinyllm: error: " under_limit "$refused" "${run[@]}"
  out=$(under_limit "$fits" "${run[@]}" 2>&1)
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "${run[*]} under ulimit -v $fits (1.25 x its need of $need KiB): exit status $rc, output: $out"
    exit 1
  fi
  printf '%-8s %-7s limit %8d KiB: refused; %8d KiB: ran (need %d KiB)\n' "$backend" "$1" "$refused" "$fits" "$need"
}

model=(--layers 32 --steps 1 --world 2)
backends=(threads procs)
[[ ${#mpirun[@]} -gt 0 ]] && backends+=(mpi)
for backend in "${backends[@]}"; do
  both_sides "$backend" train "${model[@]}"
  both_sides "$backend" verify "${model[@]}"
done
echo "refused before building the model"
