#!/usr/bin/env bash
# `mpirun -n 2 --mca btl tcp,self tinyllm train` against one process: both
# save their final checkpoint and `tinyllm diff` compares them to 1e-10.
# The MPI run has a short timeout that must never fire falsely: 5 s, over 5
# times the whole test (0.3-0.9 s, alone and beside a build or a second suite).
# Usage: mpi_train.sh WORKDIR TINYLLM MPIRUN [mpirun flags...]
set -euo pipefail
work=$1 tinyllm=$2
shift 2
rm -rf "$work" && mkdir -p "$work"
run=(--zero 2 --layers 2 --heads 2 --width 16 --seq 8 --batch 24 --steps 4)
"$@" -n 2 --mca pml ob1 --mca btl tcp,self "$tinyllm" train "${run[@]}" --timeout 5 --save "$work/mpi"
"$tinyllm" train "${run[@]}" --world 1 --save "$work/one"
"$tinyllm" diff "$work/mpi" "$work/one"
rm -rf "$work"
