"""tinyllm.dist.zero: DDP and ZeroOptimizer with the signatures of docs/ZERO.md.

DDP(model, comm) broadcasts rank 0's parameters; forward (or calling it)
runs the model; sync_grads() averages the gradients in one bucket.
ZeroOptimizer(opt_cls, params, comm, stage, **kw) shards the optimizer
state (stage 1), also the gradients (2), also the parameters (3) around
opt_cls(**kw), an unchanged tinyllm.optim.SGD or AdamW; a subclass that
overrides step or another of their methods is refused, since the C++
optimizer that steps the shard would never call it. A step on each rank:
zo.gather(); zo.zero_grad(); loss(slice).backward(); zo.step().

bitwise=True (both): the same bits at any world size (docs/BITWISE.md).
Each leaf (one window of the batch) runs its own backward, followed by
add_leaf(); the step's reduction sums every rank's leaves exactly and
divides by their number, and clip_grad_norm takes the norm exactly.
"""

from .. import optim
from .._C import dist as _dist


class DDP(_dist.DDP):
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class ZeroOptimizer:
    def __init__(self, opt_cls, params, comm, stage, *, bitwise=False, **kw):
        if not (isinstance(opt_cls, type) and issubclass(opt_cls, (optim.SGD, optim.AdamW))):
            raise TypeError(
                f"ZeroOptimizer: opt_cls must be tinyllm.optim.SGD or tinyllm.optim.AdamW (got {opt_cls!r})"
            )
        base = optim.AdamW if issubclass(opt_cls, optim.AdamW) else optim.SGD
        overridden = _overrides(opt_cls, base)
        if overridden:
            raise TypeError(
                f"ZeroOptimizer: opt_cls {opt_cls.__qualname__} overrides {', '.join(overridden)}, which would be "
                f"ignored: ZeroOptimizer steps its shard with the C++ optimizer of the base class "
                f"tinyllm.optim.{base.__name__}, so a subclass overriding step (or any other method) is not supported"
            )
        unknown = [name for name in kw if name not in opt_cls.hyperparameters]
        if unknown:
            raise TypeError(
                f"ZeroOptimizer: {opt_cls.__name__} has no hyperparameter {unknown[0]!r} "
                f"(it takes {', '.join(opt_cls.hyperparameters)})"
            )
        self._zero = _dist.ZeroOptimizer(opt_cls._factory(**kw), params, comm, stage, bitwise)

    def gather(self):
        self._zero.gather()

    def step(self):
        self._zero.step()

    def zero_grad(self):
        self._zero.zero_grad()

    def add_leaf(self):
        self._zero.add_leaf()

    def clip_grad_norm(self, max_norm):
        return self._zero.clip_grad_norm(max_norm)

    def memory_bytes(self):
        return self._zero.memory_bytes()

    @property
    def stage(self):
        return self._zero.stage

    @property
    def chunk(self):
        return self._zero.chunk


# What every class body defines, which is no override.
_CLASS_BOOKKEEPING = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__firstlineno__",
                      "__static_attributes__", "__annotations__"}


# The names of base's attributes that opt_cls or a class between them
# redefines: ZeroOptimizer builds the C++ optimizer from base's factory and
# would silently skip them (a Python step() above all).
def _overrides(opt_cls, base):
    between = opt_cls.__mro__[: opt_cls.__mro__.index(base)]
    return sorted({name for klass in between for name in vars(klass)
                   if name not in _CLASS_BOOKKEEPING and hasattr(base, name)})


__all__ = ["DDP", "ZeroOptimizer"]
