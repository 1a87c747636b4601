#!/usr/bin/env python3
"""Reference numbers for tests/optim/{sgd,adamw}_test.cpp, from PyTorch itself.

Run once (python3 tools/optim_reference.py) and paste what it prints into the
tests; the build never runs it. Parameters and gradients are small integers
over 8, so C++ builds exactly the same inputs from the same formulas. Two
parameters: p0 [2, 3] has a gradient at every step, p1 [4] only at even
steps (its grad is None at odd ones, so PyTorch skips it and its step count
lags). Printed with 17 significant digits, enough to round-trip a double.
Torch before 2.0 updates exp_avg with mul_/add_ instead of lerp_; the two
agree to a few ulps, far inside the tests' 1e-12.
"""
import torch

torch.set_default_dtype(torch.float64)
STEPS = 5


def initial(index, j):
    return ((5 * j + 3 * index) % 7 - 3) / 8.0


def gradient(index, k, j):
    return ((37 * j + 101 * k + 17 * index + 11) % 29 - 14) / 8.0


def run(make):
    p0 = torch.tensor([initial(0, j) for j in range(6)]).reshape(2, 3).requires_grad_()
    p1 = torch.tensor([initial(1, j) for j in range(4)]).requires_grad_()
    opt = make([p0, p1])
    for k in range(STEPS):
        p0.grad = torch.tensor([gradient(0, k, j) for j in range(6)]).reshape(2, 3)
        p1.grad = torch.tensor([gradient(1, k, j) for j in range(4)]) if k % 2 == 0 else None
        opt.step()
    return [p0, p1], opt


def fmt(t):
    return "{" + ", ".join("%.17g" % x for x in t.detach().flatten().tolist()) + "}"


CASES = {
    "AdamW lr 0.1, betas (0.9, 0.99), eps 1e-8, weight_decay 0.05": lambda ps: torch.optim.AdamW(
        ps, lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, foreach=False),
    "AdamW lr 0.02, betas (0.3, 0.95), eps 1e-6, weight_decay 0.1": lambda ps: torch.optim.AdamW(
        ps, lr=0.02, betas=(0.3, 0.95), eps=1e-6, weight_decay=0.1, foreach=False),
    "SGD lr 0.1": lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False),
    "SGD lr 0.05, momentum 0.9, dampening 0.1, weight_decay 0.01": lambda ps: torch.optim.SGD(
        ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=False),
    "SGD lr 0.1, momentum 0.8, weight_decay 0.02, nesterov": lambda ps: torch.optim.SGD(
        ps, lr=0.1, momentum=0.8, weight_decay=0.02, nesterov=True, foreach=False),
}

print(f"// torch {torch.__version__}, {STEPS} steps")
for name, make in CASES.items():
    params, opt = run(make)
    print(f"// {name}")
    for i, p in enumerate(params):
        print(f"p{i} = {fmt(p)}")
        state = opt.state[p]
        for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
            if key in state and state[key] is not None:
                print(f"p{i}.{key} = {fmt(state[key])}")
        if "step" in state:
            print(f"p{i}.step = {float(state['step']):g}")
