"""Fail-fast under mpirun (not collected by pytest; CTest runs it as
PythonTest.MpiFailFast): rank 1 raises before an all_reduce that rank 0 is
waiting in. tinyllm.dist.mpi_comm()'s excepthook prints rank 1's traceback
and aborts the job, so mpirun must end non-zero in seconds, not after the
collective's 60 s timeout.

Run with the mpirun command line as arguments, e.g.
`python mpi_fail_fast.py mpiexec -n 2 --oversubscribe`: this process then
starts that job on this very file, whose ranks see launched_by_mpirun()."""

import subprocess
import sys
import time

import numpy as np

from tinyllm import dist

if dist.launched_by_mpirun():
    comm = dist.mpi_comm()
    if comm.rank == 1:
        raise RuntimeError("rank one fails before all_reduce")
    comm.all_reduce(np.ones(4))
    sys.exit(0)  # not reached: rank 1 never joins

start = time.monotonic()
job = subprocess.run([*sys.argv[1:], sys.executable, __file__], capture_output=True, text=True, timeout=120)
elapsed = time.monotonic() - start
output = job.stdout + job.stderr
print(output)
assert job.returncode != 0, "mpirun exited 0 although rank 1 raised"
assert "RuntimeError: rank one fails before all_reduce" in output and "Traceback" in output, "no traceback"
assert elapsed < 20, f"mpirun took {elapsed:.1f} s: the job was not aborted (the all_reduce timeout is 60 s)"
print(f"mpirun exited {job.returncode} after {elapsed:.1f} s")
