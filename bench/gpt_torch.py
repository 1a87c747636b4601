#!/usr/bin/python3
"""The peer for bench/gpt_bench.cpp: the same GPT (DESIGN.md's layout, tied
head, tanh GELU, float64) in PyTorch on the CPU, timed the same way: one
forward + backward of a batch of 16 x 64 tokens, the mean of several rounds
after one warm-up round (Google Benchmark reports the mean too).
Prints one JSON line: tokens/s and the threads it ran with."""
import json, math, os, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.H, C // self.H).transpose(1, 2)
        y = self.attention(heads(q), heads(k), heads(v))
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    @staticmethod
    def attention(q, k, v):  # Debian's torch 1.13 predates F.scaled_dot_product_attention
        T = q.shape[-2]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class GPT(nn.Module):
    def __init__(self, V=256, T=64, L=4, H=4, C=128):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, T = 16, 64
    model = GPT().double()
    idx = torch.randint(0, 256, (B, T))
    targets = torch.randint(0, 256, (B, T))
    def step():
        model.zero_grad(set_to_none=True)
        model(idx, targets).backward()

    step()
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    start = time.perf_counter()
    for _ in range(rounds):
        step()
    seconds = (time.perf_counter() - start) / rounds
    print(json.dumps({"peer": "pytorch " + torch.__version__, "threads": threads,
                      "seconds": seconds, "tokens_per_s": B * T / seconds}))


if __name__ == "__main__":
    main()
