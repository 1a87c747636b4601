"""The hand example under mpirun (not collected by pytest; CTest runs it as
PythonTest.MpiHandExample on 4 ranks): every stage on tinyllm.dist.mpi_comm(),
each rank checking its own result and byte count. Exits non-zero on a mismatch."""

import numpy as np

import tinyllm
from tinyllm import dist, optim
from tinyllm.dist.zero import ZeroOptimizer

EXPECTED = np.array([0.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5])
BYTES = {1: {0: 256, 3: 224}, 2: {0: 176, 3: 144}, 3: {0: 96, 3: 64}}

comm = dist.mpi_comm()
assert dist.launched_by_mpirun() and comm.size == 4, f"run under mpirun -n 4 (got {comm.size} ranks)"
for stage in (1, 2, 3):
    w = tinyllm.tensor(np.arange(10.0), requires_grad=True)
    zo = ZeroOptimizer(optim.AdamW, [w], comm, stage, lr=0.5, weight_decay=0.0)
    zo.gather()
    zo.zero_grad()
    d = w - float(comm.rank)
    ((d * d).sum() * 0.5).backward()
    zo.step()
    held = sum(zo.memory_bytes().values())
    zo.gather()
    np.testing.assert_allclose(w.numpy(), EXPECTED, atol=1e-7, err_msg=f"stage {stage}, rank {comm.rank}")
    if comm.rank in BYTES[stage]:
        assert held == BYTES[stage][comm.rank], f"stage {stage}, rank {comm.rank}: {held} bytes"
total = comm.all_reduce(np.ones(1), op="sum")
assert total[0] == 4.0
print(f"rank {comm.rank}: the hand example at stages 1-3 on MPI passed")
