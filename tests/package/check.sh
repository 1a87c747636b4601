#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs the
# consumer both ways: find_package(tinyllm) and add_subdirectory, with the
# build tree's generator (a fresh machine may have ninja but no make).
set -euo pipefail
build_dir=$1 source_dir=$2 generator=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
cmake -G "$generator" -S "$source_dir/tests/package" -B "$scratch/installed" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/installed" >/dev/null
"$scratch/installed/consumer"
cmake -G "$generator" -S "$source_dir/tests/package" -B "$scratch/subdir" -DTINYLLM_SOURCE_DIR="$source_dir" >/dev/null
cmake --build "$scratch/subdir" --target consumer >/dev/null
"$scratch/subdir/consumer"
