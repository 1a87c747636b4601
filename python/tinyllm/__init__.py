"""tinyllm: exact data parallelism and ZeRO for small GPTs, in float64.

The compiled half is tinyllm._C (the C++ library through pybind11); these
files only give it its public names. Tensors come from NumPy with a copy
(tinyllm.tensor converts any numeric array to float64, as torch.tensor
does) and go back without one (Tensor.numpy() shares the memory).
"""

from . import _C
from ._C import (
    Tensor,
    causal_attention,
    cross_entropy,
    embedding,
    empty_cache,
    full,
    gelu,
    is_grad_enabled,
    layer_norm,
    linear,
    matmul,
    randn,
    tensor,
    zeros,
)


class no_grad:
    """While inside `with tinyllm.no_grad():`, ops on this thread record no graph."""

    def __enter__(self):
        self._guard = _C._NoGrad()
        self._guard.enter()
        return self

    def __exit__(self, *exc):
        self._guard.exit()
        return False


def _repr(t):
    grad = ", requires_grad=True" if t.requires_grad else ""
    try:
        values = repr(t._values())[len("array(") : -1]
    except ValueError:
        values = "<released>"
    return f"tensor({values}{grad})"


Tensor.__repr__ = _repr

from . import dist, nn, optim  # noqa: E402  (they use the names above)

__all__ = [
    "Tensor",
    "tensor",
    "zeros",
    "full",
    "randn",
    "matmul",
    "linear",
    "gelu",
    "layer_norm",
    "cross_entropy",
    "embedding",
    "causal_attention",
    "no_grad",
    "is_grad_enabled",
    "empty_cache",
    "nn",
    "optim",
    "dist",
]
