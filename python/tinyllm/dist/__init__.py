"""tinyllm.dist: Comm, chunk_bounds and spawn; DDP and ZeroOptimizer in tinyllm.dist.zero.

spawn(fn, world, backend, timeout) runs fn(comm) on every rank and returns
the results in rank order. backend="threads": the ranks are threads of this
process (every collective releases the GIL, so ranks waiting for each other
never wait for the GIL). backend="procs": the ranks are forked processes,
each with its own memory; results and exceptions come back pickled. If any
rank raises, spawn raises that rank's exception (same type, "rank r: "
before its message, the original as __cause__), the other ranks' collectives
fail fast with CommError, and no rank is left hanging. A procs rank that
ends without returning (os._exit with any status, 0 included, or a signal)
is a CommError naming it, and a result that cannot be pickled or unpickled
raises naming its rank. timeout bounds each collective's wait and the whole
spawn (TimeoutError); Ctrl-C ends it within about 50 ms plus a short grace
for the ranks (KeyboardInterrupt). See spawn for the one case where neither
can end it at once.

Under mpirun, mpi_comm() is this process's communicator. Its first call
(which initialises MPI) also wraps sys.excepthook: after the previous hook
has printed the traceback, an uncaught exception ends the whole job with
MPI_Abort(1), so the other ranks stop at once instead of waiting out their
collectives' timeout, as under `python -m mpi4py`. It is installed there and
not at import because MPI_Abort needs MPI running, and importing tinyllm
under mpirun should not change a process that never uses MPI.

A Comm is valid only while the fn it was given to runs.
"""

import numbers
import operator
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
import traceback

from .._C.dist import Comm, CommError, chunk_bounds, launched_by_mpirun
from .._C.dist import abort_mpi_job as _abort_mpi_job
from .._C.dist import mpi_comm as _mpi_comm
from .._C.dist import run_procs as _run_procs
from .._C.dist import run_threads as _run_threads


class SpawnError(RuntimeError):
    """A rank raised an exception that cannot be rebuilt with its own type."""


_MAX_WORLD = 65536  # dist::kMaxSharedMemoryWorld


def spawn(fn, world, backend="threads", timeout=60.0):
    """fn(comm) on `world` ranks; the list of their results, by rank.

    timeout (seconds) bounds every wait in a collective (CommError) and the
    whole spawn: at the deadline spawn stops the ranks and raises
    TimeoutError naming those that had not finished. Ctrl-C stops them the
    same way and raises KeyboardInterrupt. Stopping means: the ranks'
    collectives fail fast; on procs the children get SIGTERM, then SIGKILL
    1 s later, and all are reaped (this always ends them, so a child
    deadlocked on a lock another thread held at fork is bounded too); on
    threads the exception is raised inside each rank thread, and spawn
    waits for them to end. The case neither can end at once: a threads
    rank blocked outside Python and outside the collectives (time.sleep,
    a lock, a long C++ call, blocking I/O), or one that catches the
    exception and goes on, holds spawn until it returns to Python.
    """
    if not callable(fn):
        raise TypeError(f"spawn: fn must be callable (got {type(fn).__name__} {fn!r})")
    if isinstance(world, bool) or not isinstance(world, numbers.Integral):
        raise ValueError(f"spawn: world must be an int (got {type(world).__name__} {world!r})")
    world = operator.index(world)  # NumPy's integers too
    if not 1 <= world <= _MAX_WORLD:
        raise ValueError(f"spawn: world must be from 1 to {_MAX_WORLD}, the shared-memory backends' limit (got {world})")
    if backend == "threads":
        return _spawn_threads(fn, world, timeout)
    if backend == "procs":
        return _spawn_procs(fn, world, timeout)
    raise ValueError(f"spawn: backend must be 'threads' or 'procs' (got {backend!r})")


def _spawn_threads(fn, world, timeout):
    results = [None] * world
    errors = {}
    finished = [False] * world

    def rank_main(comm):
        r = comm.rank
        try:
            results[r] = fn(comm)
        except BaseException as error:
            errors[r] = (error, None, "")
            raise
        finally:
            finished[r] = True

    def late():
        running = [r for r in range(world) if not finished[r]]
        return f"{_ranks(running)} had not finished" if running else None

    try:
        _run_threads(world, rank_main, timeout, _deadline(timeout, late))
    except Exception as failure:
        _raise_rank_error(failure, errors)
    return results


# Each child writes its outcome to its own file, read once every child has
# exited: a pipe could fill up and block a child that the parent is waiting
# for. The file is one byte, b"o" (a result) or b"e" (an error), then the
# pickle of the result or of (exception, traceback, context), so that the
# parent knows which of the two failed to unpickle.
def _spawn_procs(fn, world, timeout):
    folder = tempfile.mkdtemp(prefix="tinyllm-spawn-")

    def rank_main(comm):
        path = _path(folder, comm.rank)
        try:
            try:
                result = fn(comm)
            except BaseException as error:
                _write(path, b"e" + _error_pickle(error, ""))
                raise
            try:
                data = b"o" + pickle.dumps(result)
            except Exception as error:
                _write(path, b"e" + _error_pickle(error, "its result could not be pickled: "))
                raise
            _write(path, data)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()

    # Checked only at the deadline: a rank has finished once its file is there.
    def late():
        running = [r for r in range(world) if not os.path.exists(_path(folder, r))]
        if running:
            return f"{_ranks(running)} had not finished"
        return "every rank had returned but not every process had exited"

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        try:
            _run_procs(world, rank_main, timeout, _deadline(timeout, late))
            failure = None
        except Exception as error:
            failure = error
        outcomes = [_read(_path(folder, r)) for r in range(world)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    errors = {r: o[1] for r, o in enumerate(outcomes) if o is not None and o[0] == "error"}
    if failure is not None:
        _raise_rank_error(failure, errors)
    if errors:  # results that did not unpickle here
        rank = min(errors)
        _raise_as_rank(rank, *errors[rank])
    for r, outcome in enumerate(outcomes):
        if outcome is None:  # the launcher saw every rank return, so this is a bug
            raise SpawnError(f"rank {r}: returned, but its result file is missing")
    return [o[1] for o in outcomes]


# The poll the launchers call about every 50 ms: raises TimeoutError once
# `timeout` seconds have passed, naming what late() says is late (nothing
# when it returns None).
def _deadline(timeout, late):
    end = time.monotonic() + timeout

    def poll():
        if time.monotonic() >= end and (what := late()) is not None:
            raise TimeoutError(f"spawn: {what} after {timeout:g} s (timeout= bounds the whole spawn)")

    return poll


def _ranks(ranks, most=8):
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    named = ", ".join(str(r) for r in ranks[:most])
    return f"ranks {named}" + (f" and {len(ranks) - most} more" if len(ranks) > most else "")


def _path(folder, r):
    return os.path.join(folder, f"{r}.pickle")


def _error_pickle(error, context):
    return pickle.dumps((_picklable(error), traceback.format_exc(), context))


def _write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)


# ("ok", result) or ("error", (exception, traceback, context)); None when
# the rank wrote nothing. A pickle that fails to load is that rank's error.
def _read(path):
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        kind = f.read(1)
        try:
            value = pickle.load(f)
        except Exception as error:
            what = "result" if kind == b"o" else "exception"
            return "error", (error, None, f"its {what} could not be unpickled: ")
    return ("ok", value) if kind == b"o" else ("error", value)


def _picklable(error):
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return SpawnError(f"{type(error).__name__}: {error}")


# The launcher's error names the rank that failed first; raise that rank's
# own exception, with its type, when it is known.
def _raise_rank_error(failure, errors):
    match = re.match(r"rank (\d+)", str(failure))
    rank = int(match.group(1)) if match else None
    if rank not in errors:
        raise failure
    _raise_as_rank(rank, *errors[rank])


def _raise_as_rank(rank, error, remote_traceback, context):
    message = str(error)
    if context or not re.match(r"rank \d+", message):
        message = f"rank {rank}: {context}{message}"
    try:
        raised = type(error)(message)
    except Exception:
        raised = SpawnError(f"rank {rank}: {context}{type(error).__name__}: {error}")
    raised.rank = rank
    if remote_traceback:
        raised.add_note(f"rank {rank}'s traceback:\n{remote_traceback}")
    raise raised from error


def mpi_comm():
    """This process's communicator under mpirun (MPI_COMM_WORLD). The first
    call initialises MPI and makes an uncaught exception abort the whole job
    (see the module's docstring)."""
    comm = _mpi_comm()
    _abort_job_on_uncaught_exceptions()
    return comm


_hook_installed = False


def _abort_job_on_uncaught_exceptions():
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        try:
            previous(kind, value, tb)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass  # a closed stream must not keep the job alive
            _abort_mpi_job(1)

    sys.excepthook = excepthook


__all__ = ["Comm", "CommError", "SpawnError", "chunk_bounds", "spawn", "mpi_comm", "launched_by_mpirun"]

# The submodule as an attribute, as torch.distributed exposes its own:
# `from tinyllm import dist` then `dist.zero.ZeroOptimizer` works.
from . import zero  # noqa: E402  (it uses the names above)
