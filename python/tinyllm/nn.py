"""tinyllm.nn: Module, Linear, LayerNorm, Embedding, GPT and GPTConfig.

Module is the C++ nn::Module. A Python subclass registers what it assigns,
as torch.nn.Module does: a leaf tensor that requires grad becomes a
parameter, a Module becomes a child, both in assignment order, which is the
order parameters() and therefore DDP and ZeRO use. Names starting with "_"
are never registered. Calling a module calls its forward.

- The same tensor may be assigned under two names (tied weights): both are
  in state_dict(), and parameters()/named_parameters() list it once, under
  the first name, so the optimizer, DDP and ZeRO see it once.
- Assigning to a registered name replaces the registration in its place
  (m.w = new_parameter, m.fc = Linear(...)); a parameter assigned to a child's
  name, or a module to a parameter's, drops the old one and joins the end.
- None to a registered name unregisters it (m.bias = None: no bias, as
  Linear(bias=False) has); any other value there is a TypeError, as in torch:
  "cannot assign 'Tensor' as parameter 'w' (a leaf Tensor that requires grad,
  or None, expected)". `del m.w` unregisters too.
- state_dict() maps every name to the parameter itself (no copy);
  load_state_dict() copies values in by name, refusing missing, unexpected
  and duplicate names, wrong shapes and wrong types, naming each.
- An __init__ must call super().__init__() before assigning a parameter or a
  module; before that, registration and every method raise AttributeError
  ("cannot assign parameters before Module.__init__() call").
"""

from ._C import Tensor
from ._C.nn import GPT, Embedding, GPTConfig, LayerNorm, Linear, Module


def _is_property(self, name):
    # Attributes the C++ classes define (Linear.weight) are read-only
    # properties, not registrations to replace: Python refuses the write.
    return isinstance(getattr(type(self), name, None), property)


def _setattr(self, name, value):
    if not name.startswith("_") and not _is_property(self, name):
        if isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._register_parameter(name, value)
        elif isinstance(value, Module):
            self._register_module(name, value)
        else:
            kind = self._registered(name)
            if kind is not None and value is not None:
                expected = "a leaf Tensor that requires grad" if kind == "parameter" else "a Module"
                what = "parameter" if kind == "parameter" else "child module"
                raise TypeError(f"cannot assign '{type(value).__name__}' as {what} '{name}' ({expected}, or None, expected)")
            if kind is not None:
                self._unregister(name)
    object.__setattr__(self, name, value)


def _delattr(self, name):
    if not name.startswith("_") and not _is_property(self, name) and self._registered(name) is not None:
        self._unregister(name)
    object.__delattr__(self, name)


def _call(self, *args, **kwargs):
    return self.forward(*args, **kwargs)


def _forward(self, *args, **kwargs):
    raise NotImplementedError(f"{type(self).__name__}: a Module subclass must define forward")


Module.__setattr__ = _setattr
Module.__delattr__ = _delattr
Module.__call__ = _call
Module.forward = _forward

__all__ = ["Module", "Linear", "LayerNorm", "Embedding", "GPT", "GPTConfig"]
