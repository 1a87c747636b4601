"""What the tests share: a central-difference gradient check, the small
model the ZeRO and DDP tests train, and its reference training in NumPy-fed
one-process tinyllm."""

import numpy as np

import tinyllm
from tinyllm import nn

BACKENDS = ["threads", "procs"]


def gradcheck(f, inputs, eps=1e-6, tol=1e-7):
    """f(*tensors) -> scalar tensor; compares every input's grad with central
    differences (eps 1e-6, float64, so the error is about eps² and rounding)."""
    tensors = [tinyllm.tensor(x, requires_grad=True) for x in inputs]
    f(*tensors).backward()
    for i, x in enumerate(inputs):
        analytic = tensors[i].grad.numpy()
        numeric = np.zeros_like(x, dtype=np.float64)
        flat = numeric.reshape(-1)
        for j in range(x.size):
            def at(delta):
                moved = [np.array(v, dtype=np.float64, copy=True) for v in inputs]
                moved[i].reshape(-1)[j] += delta
                return f(*[tinyllm.tensor(v) for v in moved]).item()

            flat[j] = (at(eps) - at(-eps)) / (2 * eps)
        np.testing.assert_allclose(analytic, numeric, rtol=tol, atol=tol, err_msg=f"input {i}")


class TinyNet(nn.Module):
    """44 parameters: Linear(4, 6) and Linear(6, 2), in that order."""

    def __init__(self, seed):
        super().__init__()
        self.fc1 = nn.Linear(4, 6, seed=seed, std=0.5)
        self.fc2 = nn.Linear(6, 2, seed=seed + 100, std=0.5)

    def forward(self, x):
        return self.fc2(tinyllm.gelu(self.fc1(x)))


def batch(step, rows=8):
    """The global batch of a step: inputs [rows, 4] and targets [rows, 2]."""
    rng = np.random.default_rng(step)
    return rng.standard_normal((rows, 4)), rng.standard_normal((rows, 2))


def tiny_loss(net, x, y):
    d = net(tinyllm.tensor(x)) - tinyllm.tensor(y)
    return (d * d).mean()


def rows(comm, n):
    """This rank's equal slice of n rows."""
    per = n // comm.size
    return slice(comm.rank * per, (comm.rank + 1) * per)
