"""tinyllm.dist: Comm, chunk_bounds and spawn; DDP and ZeroOptimizer in tinyllm.dist.zero.

spawn(fn, world, backend) runs fn(comm) on every rank and returns the
results in rank order. backend="threads": the ranks are threads of this
process (every collective releases the GIL, so ranks waiting for each other
never wait for the GIL). backend="procs": the ranks are forked processes,
each with its own memory; results and exceptions come back pickled. If any
rank raises, spawn raises that rank's exception (same type, "rank r: "
before its message, the original as __cause__), the other ranks' collectives
fail fast with CommError, and no rank is left hanging. Under mpirun,
mpi_comm() is this process's communicator.

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
import traceback

from .._C.dist import Comm, CommError, chunk_bounds, launched_by_mpirun, mpi_comm
from .._C.dist import run_procs as _run_procs
from .._C.dist import run_threads as _run_threads


class SpawnError(RuntimeError):
    """A rank raised an exception that cannot be rebuilt with its own type."""


_MAX_WORLD = 65536  # dist::kMaxSharedMemoryWorld


def spawn(fn, world, backend="threads", timeout=60.0):
    """fn(comm) on `world` ranks; the list of their results, by rank."""
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

    def rank_main(comm):
        r = comm.rank
        try:
            results[r] = fn(comm)
        except BaseException as error:
            errors[r] = (error, None)
            raise

    try:
        _run_threads(world, rank_main, timeout)
    except Exception as failure:
        _raise_rank_error(failure, errors)
    return results


# Each child writes ("ok", result) or ("error", exception, traceback) to its
# own file, read once every child has exited: a pipe could fill up and
# block a child that the parent is waiting for.
def _spawn_procs(fn, world, timeout):
    folder = tempfile.mkdtemp(prefix="tinyllm-spawn-")

    def rank_main(comm):
        r = comm.rank
        path = os.path.join(folder, f"{r}.pickle")
        try:
            try:
                payload = ("ok", fn(comm))
                data = pickle.dumps(payload)
            except BaseException as error:
                data = pickle.dumps(("error", _picklable(error), traceback.format_exc()))
                _write(path, data)
                raise
            _write(path, data)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        try:
            _run_procs(world, rank_main, timeout)
            failure = None
        except Exception as error:
            failure = error
        payloads = [_read(os.path.join(folder, f"{r}.pickle")) for r in range(world)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    errors = {r: (p[1], p[2]) for r, p in enumerate(payloads) if p is not None and p[0] == "error"}
    if failure is not None:
        _raise_rank_error(failure, errors)
    return [p[1] for p in payloads]


def _write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)


def _read(path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


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
    error, remote_traceback = errors[rank]
    message = str(error)
    if not re.match(r"rank \d+", message):
        message = f"rank {rank}: {message}"
    try:
        raised = type(error)(message)
    except Exception:
        raised = SpawnError(f"rank {rank}: {type(error).__name__}: {error}")
    raised.rank = rank
    if remote_traceback:
        raised.add_note(f"rank {rank}'s traceback:\n{remote_traceback}")
    raise raised from error


__all__ = ["Comm", "CommError", "SpawnError", "chunk_bounds", "spawn", "mpi_comm", "launched_by_mpirun"]

# The submodule as an attribute, as torch.distributed exposes its own:
# `from tinyllm import dist` then `dist.zero.ZeroOptimizer` works.
from . import zero  # noqa: E402  (it uses the names above)
