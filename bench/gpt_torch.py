#!/usr/bin/python3
"""The peer for bench/gpt_bench.cpp: the same GPT (tools/torch_gpt.py) in
PyTorch on the CPU, float64, timed the same way: one forward + backward of a
batch of 16 x 64 tokens, the mean of several rounds after one warm-up round
(Google Benchmark reports the mean too). Prints one JSON line."""
import json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch
from torch_gpt import GPT


def main():
    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    # The peer at its fastest here: OpenBLAS (Debian's torch calls the system
    # BLAS) takes the threads, torch's own OpenMP pool one; both at 2 contend
    # for the 2 cores and run ~40% slower.
    torch.set_num_threads(1)
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
