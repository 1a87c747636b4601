"""The hand example under mpirun (not collected by pytest; CTest runs it as
PythonTest.MpiHandExample on 4 ranks): every stage on tinyllm.dist.mpi_comm(),
each rank checking its own result and byte count. Exits non-zero on a mismatch."""

import numpy as np
from test_zero import hand_step

from tinyllm import dist

EXPECTED = np.array([0.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5])
BYTES = {1: {0: 256, 3: 224}, 2: {0: 176, 3: 144}, 3: {0: 96, 3: 64}}

comm = dist.mpi_comm()
assert dist.launched_by_mpirun() and comm.size == 4, f"run under mpirun -n 4 (got {comm.size} ranks)"
for stage in (1, 2, 3):
    w, memory, _ = hand_step(comm, stage)
    held = sum(memory.values())
    np.testing.assert_allclose(w, EXPECTED, atol=1e-7, err_msg=f"stage {stage}, rank {comm.rank}")
    if comm.rank in BYTES[stage]:
        assert held == BYTES[stage][comm.rank], f"stage {stage}, rank {comm.rank}: {held} bytes"
total = comm.all_reduce(np.ones(1), op="sum")
assert total[0] == 4.0
