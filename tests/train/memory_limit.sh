#!/usr/bin/env bash
# A model larger than the memory it may take is refused before any of it
# is built: exit status 1 within a second or two, the message naming the
# need and the limit, rather than an OOM kill (137) or std::bad_alloc.
# Usage: memory_limit.sh TINYLLM [no-ulimit] (AddressSanitizer's shadow memory
# cannot be mapped under `ulimit -v`, so its build skips that half).
set -uo pipefail
tinyllm=$1 limits=${2:-ulimit}

# refuses EXPECTED COMMAND...: the command fails with status 1, quickly, saying EXPECTED.
refuses() {
  local expected=$1 start out rc elapsed
  shift
  start=$(date +%s%N)
  out=$("$@" 2>&1)
  rc=$?
  elapsed=$((($(date +%s%N) - start) / 1000000))
  if [[ $rc -ne 1 || "$out" != *"$expected"* || $elapsed -gt 3000 ]]; then
    echo "$*: exit status $rc after $elapsed ms, output: $out"$'\n'"expected status 1 within 3 s and: $expected"
    exit 1
  fi
}

# 100000 blocks of width 128: some 600 GiB on one rank, beyond the machine.
refuses "tinyllm: error: --layers 100000 --heads 4 --width 128 --seq 64 (vocab 256) with --zero 0 on 1 rank needs at least 590.9 GiB per rank x 1 rank on this machine, but " \
  "$tinyllm" train --layers 100000 --steps 1
refuses "GiB are available (MemAvailable in /proc/meminfo)" "$tinyllm" verify --layers 100000 --steps 1 --world 2

if [[ $limits == no-ulimit ]]; then
  echo "refused before building the model"
  exit 0
fi

# 300 blocks: 1.8 GiB a rank, two threads' worth beyond `ulimit -v` of 2.9 GiB
# (forked ranks count one each); verify goes through the same check.
limited=(bash -c 'ulimit -v 3000000; exec "$0" "$@"' "$tinyllm")
refuses "with --zero 0 on 2 ranks needs at least 1.8 GiB per rank x 2 ranks in this process, but 2." \
  "${limited[@]}" train --layers 300 --steps 1 --world 2 --backend threads
refuses "(the address-space limit RLIMIT_AS (ulimit -v), less the " \
  "${limited[@]}" verify --layers 300 --steps 1 --world 2 --backend threads
echo "refused before building the model"
