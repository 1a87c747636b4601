#!/usr/bin/env bash
# A command that must end (within the test's timeout: a hung rank fails it)
# with the given exit status and a line of its output matching a regex.
# Usage: exits_with.sh STATUS REGEX COMMAND...
set -uo pipefail
status=$1 regex=$2
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
[[ $got == "$status" ]] || { echo "exit status $got, expected $status"; exit 1; }
grep -Eq -- "$regex" <<<"$out" || { echo "no line matches: $regex"; exit 1; }
echo "exits_with passed"
