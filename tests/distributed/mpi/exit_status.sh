#!/bin/sh
# Runs a command and prints "exit status N" last, so a CTest expression can
# pin both what the command printed and that it failed.
"$@"
echo "exit status $?"
