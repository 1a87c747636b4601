"""tinyllm.nn: Module, Linear, LayerNorm, Embedding, GPT and GPTConfig.

Module is the C++ nn::Module. A Python subclass registers what it assigns,
as torch.nn.Module does: a leaf tensor that requires grad becomes a
parameter, a Module becomes a child, both in assignment order, which is the
order parameters() and therefore DDP and ZeRO use. Calling a module calls
its forward.
"""

from ._C import Tensor
from ._C.nn import GPT, Embedding, GPTConfig, LayerNorm, Linear, Module


def _setattr(self, name, value):
    if not name.startswith("_"):
        if isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._register_parameter(name, value)
        elif isinstance(value, Module):
            self._register_module(name, value)
    object.__setattr__(self, name, value)


def _call(self, *args, **kwargs):
    return self.forward(*args, **kwargs)


def _forward(self, *args, **kwargs):
    raise NotImplementedError(f"{type(self).__name__}: a Module subclass must define forward")


Module.__setattr__ = _setattr
Module.__call__ = _call
Module.forward = _forward

__all__ = ["Module", "Linear", "LayerNorm", "Embedding", "GPT", "GPTConfig"]
