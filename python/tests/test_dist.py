"""tinyllm.dist: chunk_bounds, the collectives on tensors and NumPy arrays
on both backends, spawn's results and errors (one rank raising, a procs
rank exiting early, results that do not pickle, bad arguments), how spawn
ends (Ctrl-C, its timeout as a deadline), and the GIL: rank threads run
while another waits in a collective. A test whose spawn would hang without
its fix runs it in a fresh interpreter, so that it fails instead."""

import os
import selectors
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tinyllm
from support import BACKENDS
from tinyllm import dist


def test_chunk_bounds():
    assert [dist.chunk_bounds(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [dist.chunk_bounds(2, 3, r) for r in range(3)] == [(0, 1), (1, 2), (2, 2)]
    with pytest.raises(ValueError, match="0 <= r < p|rank"):
        dist.chunk_bounds(10, 4, 4)


def collectives(comm):
    p, r = comm.size, comm.rank
    n = 7
    x = np.arange(n, dtype=np.float64) + 10 * r  # rank-dependent fills: expected values are formulas
    total = p * np.arange(n) + 10 * p * (p - 1) / 2
    out = {}
    out["all_reduce_sum"] = comm.all_reduce(x.copy(), op="sum")
    out["all_reduce_mean"] = comm.all_reduce(x.copy(), op="mean")
    t = tinyllm.tensor(x)
    comm.all_reduce(t, op="sum")
    out["tensor_all_reduce"] = t.numpy().copy()
    out["broadcast"] = comm.broadcast(x.copy(), root=p - 1)
    a, b = dist.chunk_bounds(n, p, r)
    out["reduce_scatter"] = comm.reduce_scatter(x, op="sum")
    chunk = np.full(b - a, float(r))
    out["all_gather"] = comm.all_gather(chunk, np.zeros(n))
    out["tensor_reduce_scatter"] = comm.reduce_scatter(tinyllm.tensor(x), op="mean").numpy().copy()
    comm.barrier()
    return out, total, (a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_collectives_on_arrays_and_tensors(backend, world):
    n = 7
    for r, (out, total, (a, b)) in enumerate(dist.spawn(collectives, world, backend)):
        np.testing.assert_array_equal(out["all_reduce_sum"], total)
        np.testing.assert_allclose(out["all_reduce_mean"], total / world, rtol=1e-15)
        np.testing.assert_array_equal(out["tensor_all_reduce"], total)
        np.testing.assert_array_equal(out["broadcast"], np.arange(n) + 10 * (world - 1))
        np.testing.assert_array_equal(out["reduce_scatter"], total[a:b])
        np.testing.assert_allclose(out["tensor_reduce_scatter"], total[a:b] / world, rtol=1e-15)
        owner = [q for q in range(world) for _ in range(*dist.chunk_bounds(n, world, q))]
        np.testing.assert_array_equal(out["all_gather"], owner)


def test_collectives_refuse_arrays_they_cannot_write_in_place():
    def rank(comm):
        with pytest.raises(ValueError, match=r"all_reduce: the array must be float64 \(got int64\)"):
            comm.all_reduce(np.arange(4))
        with pytest.raises(ValueError, match="must be C-contiguous"):
            comm.all_reduce(np.zeros((4, 4))[:, 0])
        ro = np.zeros(4)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            comm.broadcast(ro)
        with pytest.raises(ValueError, match=r"op must be 'sum' or 'mean' \(got 'max'\)"):
            comm.all_reduce(np.zeros(4), op="max")
        with pytest.raises(TypeError, match="expected a tinyllm.Tensor or a numpy.ndarray"):
            comm.all_reduce([1.0, 2.0])
        comm.barrier()  # the group is still in step
        return True

    assert dist.spawn(rank, 2) == [True, True]


def test_ranks_that_disagree_get_a_comm_error_naming_a_rank():
    def rank(comm):
        comm.all_reduce(np.zeros(3 + comm.rank))

    with pytest.raises(dist.CommError, match=r"rank \d"):
        dist.spawn(rank, 2, timeout=10)
    assert issubclass(dist.CommError, RuntimeError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_spawn_returns_results_by_rank(backend):
    assert dist.spawn(lambda comm: (comm.rank, comm.size), 3, backend) == [(0, 3), (1, 3), (2, 3)]


def test_procs_ranks_are_processes_and_threads_are_not():
    pids = dist.spawn(lambda comm: os.getpid(), 3, "procs")
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert dist.spawn(lambda comm: os.getpid(), 3, "threads") == [os.getpid()] * 3


class Boom(Exception):
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_on_one_rank_is_raised_in_the_caller_naming_it(backend):
    def rank(comm):
        if comm.rank == 2:
            raise Boom("rank two fails")
        comm.barrier()  # the others wait here and must fail fast, not hang
        return comm.rank

    start = time.monotonic()
    with pytest.raises(Boom, match="^rank 2: rank two fails") as info:
        dist.spawn(rank, 4, backend, timeout=30)
    assert time.monotonic() - start < 15
    assert info.value.rank == 2
    assert isinstance(info.value.__cause__, Boom)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_error_inside_a_rank_stays_a_value_error(backend):
    def rank(comm):
        if comm.rank == 0:
            tinyllm.tensor(np.ones(2)) + tinyllm.tensor(np.ones(3))
        comm.barrier()

    with pytest.raises(ValueError, match="^rank 0: "):
        dist.spawn(rank, 2, backend, timeout=30)


def test_procs_rank_that_dies_is_named():
    def rank(comm):
        if comm.rank == 1:
            os.kill(os.getpid(), 9)
        comm.barrier()

    with pytest.raises(dist.CommError, match="rank 1 died of signal 9"):
        dist.spawn(rank, 3, "procs", timeout=5)


# How a procs rank can end without returning, and the launcher's word for it.
EARLY_EXITS = {
    "exit 0": (lambda: os._exit(0), "rank 1 exited with status 0 before returning a result"),
    "exit 3": (lambda: os._exit(3), "rank 1 exited with status 3 before returning a result"),
    "SIGKILL": (lambda: os.kill(os.getpid(), signal.SIGKILL), r"rank 1 died of signal 9 \(Killed\)"),
}


@pytest.mark.parametrize("collective", [True, False], ids=["others-in-barrier", "others-return"])
@pytest.mark.parametrize("how", EARLY_EXITS)
def test_procs_rank_that_exits_without_returning_is_named(how, collective):
    leave, message = EARLY_EXITS[how]

    def rank(comm):
        if comm.rank == 1:
            leave()
        if collective:
            comm.barrier()  # must fail fast, not wait out the timeout
        return comm.rank

    start = time.monotonic()
    with pytest.raises(dist.CommError, match=message):
        dist.spawn(rank, 3, "procs", timeout=60)
    assert time.monotonic() - start < 20


def test_procs_result_that_cannot_be_pickled_is_an_error():
    with pytest.raises(AttributeError, match="^rank 0: its result could not be pickled: .*lambda"):
        dist.spawn(lambda comm: (lambda: None) if comm.rank == 0 else 1, 2, "procs", timeout=10)


def refuse_to_load():
    raise ValueError("this result refuses to be unpickled")


class LoadsBadly:
    """Pickles fine in the child; unpickling it in the parent raises."""

    def __reduce__(self):
        return refuse_to_load, ()


def test_procs_result_that_cannot_be_unpickled_names_its_rank():
    with pytest.raises(ValueError, match="^rank 1: its result could not be unpickled: this result refuses") as info:
        dist.spawn(lambda comm: LoadsBadly() if comm.rank == 1 else comm.rank, 2, "procs", timeout=10)
    assert info.value.rank == 1


def run_script(code):
    """Starts `code` in a fresh interpreter with SIGINT's default handler
    (a background job may have inherited it ignored)."""
    header = "import os, signal, sys, threading, time\nfrom tinyllm import dist\n"
    header += "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    return subprocess.Popen([sys.executable, "-c", header + code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ)


def finish(proc, timeout):
    """(stdout, stderr, seconds it took); kills it and fails past `timeout`."""
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return out, err, time.monotonic() - start


def read_lines(proc, count, timeout=30):
    """The first `count` lines proc prints, waiting at most `timeout` s. It
    reads the pipe's bytes itself: a buffered readline could take in more
    lines than it returns, which select would then not see."""
    data = b""
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while data.count(b"\n") < count and selector.select(max(0.0, deadline - time.monotonic())):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    lines = data.decode().splitlines()
    assert len(lines) >= count, f"got {lines} before the deadline"
    return lines[:count]


# After spawn returns, the processes whose parent is this one (zombies too).
CHILDREN = """
def children():
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                if name.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.append(int(name))
        except (OSError, ValueError):
            pass
    return found
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_ends_a_spawn_whose_rank_loops_forever(backend):
    # Rank 0 loops in Python and rank 1 waits in a barrier; SIGINT reaches
    # only the caller, which must stop both and raise KeyboardInterrupt.
    proc = run_script(CHILDREN + f"""
def rank(comm):
    sys.stdout.write(f"started {{comm.rank}} {{os.getpid()}}\\n")  # one write: the threads' lines stay whole
    sys.stdout.flush()
    if comm.rank == 1:
        comm.barrier()
    while True:
        pass
try:
    dist.spawn(rank, 2, {backend!r}, timeout=60)
except KeyboardInterrupt:
    print("children left:", children(), flush=True)
    raise
""")
    pids = [int(line.split()[2]) for line in read_lines(proc, 2)]
    time.sleep(0.2)  # rank 1 is in its barrier by now, rank 0 in its loop (either way spawn must end)
    proc.send_signal(signal.SIGINT)
    out, err, seconds = finish(proc, timeout=30)
    assert "KeyboardInterrupt" in err, err
    assert seconds < 20
    assert "children left: []" in out, out
    if backend == "procs":
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}"), f"rank process {pid} outlived spawn"


def test_procs_timeout_bounds_a_rank_deadlocked_by_a_lock_held_at_fork():
    # A parent thread holds the lock while spawn forks, so rank 1's copy of
    # it is held by a thread that does not exist in the child: acquire never
    # returns, and rank 0 returns without a collective to time out in.
    proc = run_script(CHILDREN + """
lock = threading.Lock()
held, done = threading.Event(), threading.Event()
def holder():
    with lock:
        held.set()
        done.wait(120)
threading.Thread(target=holder).start()
held.wait()
def rank(comm):
    if comm.rank == 1:
        lock.acquire()
    return comm.rank
start = time.monotonic()
try:
    dist.spawn(rank, 2, "procs", timeout=3)
except TimeoutError as error:
    print("raised", type(error).__name__, error, flush=True)
print(f"after {time.monotonic() - start:.1f} s; children left:", children(), flush=True)
done.set()
""")
    out, err, seconds = finish(proc, timeout=60)
    assert "raised TimeoutError spawn: rank 1 had not finished after 3 s" in out, out + err
    assert "children left: []" in out, out
    assert seconds < 15


def test_threads_timeout_bounds_the_whole_spawn():
    proc = run_script("""
def rank(comm):
    while True:
        pass
try:
    dist.spawn(rank, 2, "threads", timeout=3)
except TimeoutError as error:
    print("raised", type(error).__name__, error, flush=True)
""")
    out, err, seconds = finish(proc, timeout=60)
    assert "raised TimeoutError spawn: ranks 0, 1 had not finished after 3 s" in out, out + err
    assert seconds < 15


def test_spawn_refuses_bad_arguments():
    for world in (0, -1, 2.5, "4", True, 2**31, 10**6):
        with pytest.raises(ValueError, match=r"world must be (an int|from 1 to 65536, .*) \(got"):
            dist.spawn(lambda comm: None, world)
    assert dist.spawn(lambda comm: comm.rank, np.int64(2)) == [0, 1]
    with pytest.raises(TypeError, match=r"fn must be callable \(got int 3\)"):
        dist.spawn(3, 2)
    with pytest.raises(ValueError, match=r"backend must be 'threads' or 'procs' \(got 'mpi'\)"):
        dist.spawn(lambda comm: None, 2, "mpi")


def test_a_comm_kept_after_spawn_raises():
    (comm,) = dist.spawn(lambda comm: comm, 1)
    with pytest.raises(ValueError, match="used after the spawn"):
        comm.rank


def test_threads_release_the_gil_in_every_collective():
    # Rank 0 enters the collective first and stays there until rank 1 joins;
    # rank 1 must run Python meanwhile, which it can only do if rank 0's
    # collective let go of the GIL.
    entered = threading.Event()

    def rank(comm):
        if comm.rank == 0:
            entered.set()
            comm.all_reduce(np.ones(1000))
            return None
        assert entered.wait(10)
        time.sleep(0.05)  # rank 0 is inside all_reduce by now
        spins = 0
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            spins += 1  # pure Python, holding the GIL between switches
        comm.all_reduce(np.ones(1000))
        return spins

    results = dist.spawn(rank, 2, "threads", timeout=5)
    assert results[1] > 1000


def test_threads_run_python_while_another_rank_computes_in_c_plus_plus():
    # Rank 0's backward is one C++ call; rank 1 spins in Python meanwhile,
    # stamping each turn. With the GIL released in C++, rank 1 runs inside
    # the middle half of that call however many cores are free (time-shared
    # on one, in parallel on two); were the GIL held, it could not run there
    # at all. Asking that two computes overlap in time instead would need a
    # second free core, which a loaded machine does not promise.
    done = threading.Event()

    def rank(comm):
        if comm.rank == 1:
            comm.barrier()
            stamps = []
            while not done.is_set():
                stamps.append(time.monotonic())
            return stamps
        model = tinyllm.nn.GPT(tinyllm.nn.GPTConfig(n_layer=4, n_embd=256, block_size=64), seed=0)
        idx = np.zeros((8, 64), dtype=np.int32)
        loss = model.loss(idx, idx)
        comm.barrier()
        start = time.monotonic()
        loss.backward()
        end = time.monotonic()
        done.set()
        return start, end

    (start, end), stamps = dist.spawn(rank, 2, "threads")
    quarter = (end - start) / 4
    inside = [t for t in stamps if start + quarter < t < end - quarter]
    assert inside, f"rank 1 never ran during the middle {2 * quarter:.3f} s of rank 0's backward"


def test_zero_is_an_attribute_of_dist_without_importing_it():
    # A fresh interpreter, so that no other test has imported tinyllm.dist.zero.
    import subprocess
    import sys

    for code in ["import tinyllm; tinyllm.dist.zero.ZeroOptimizer", "from tinyllm import dist; dist.zero.DDP"]:
        subprocess.run([sys.executable, "-c", code], check=True, env=os.environ)


def test_spawn_refuses_a_timeout_out_of_range():
    for timeout in (0, -1, float("inf"), float("nan"), 1e300):
        with pytest.raises(ValueError, match=r"timeout must be a number of seconds from 0.001 to 1e\+09"):
            dist.spawn(lambda comm: None, 1, timeout=timeout)
