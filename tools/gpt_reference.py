#!/usr/bin/python3
"""Prints the reference numbers of GPTTest.ProducesPyTorchValues: the loss of
a tiny GPT and, for each parameter, a weighted sum of its gradient, computed
by PyTorch (tools/torch_gpt.py) in float64. Every input is a formula that is
exact in any language, so no weights need to travel. Run with Debian's
python3-torch: /usr/bin/python3 tools/gpt_reference.py"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch_gpt import GPT

V, T, L, H, C, B = 11, 5, 2, 2, 8, 2


def value(k, j):  # parameter k in named order, element j in row-major order
    return ((7 * j + 13 * k) % 17 - 8) / 40.0


def main():
    model = GPT(V, T, L, H, C).double()
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            flat = torch.tensor([value(k, j) for j in range(p.numel())], dtype=torch.float64)
            p.copy_(flat.view_as(p))
    i = torch.arange(B * T)
    idx = ((5 * i + 3) % V).view(B, T)
    targets = ((3 * i + 1) % V).view(B, T)
    loss = model(idx, targets)
    loss.backward()
    print(f"  const double loss = {loss.item():.17g};")
    print("  const std::vector<std::pair<std::string, double>> grad_sums = {")
    for name, p in model.named_parameters():
        weights = torch.tensor([(j % 7) - 3 for j in range(p.numel())], dtype=torch.float64)
        print(f'      {{"{name}", {(p.grad.flatten() * weights).sum().item():.17g}}},')
    print("  };")


if __name__ == "__main__":
    main()
