#!/usr/bin/python3
"""bench/gpt_bench.cpp's step called from Python: the same GPT (default
config, seed 1337), the same token ids, one forward + backward of 16 x 64
tokens through `import tinyllm`, timed as gpt_torch.py times its peer (the
mean of several rounds after one warm-up round). What it measures against
gpt_bench is the binding's overhead. Needs PYTHONPATH=<build>/python.
Prints one JSON line."""
import json
import os
import sys
import time

import numpy as np

import tinyllm


def main():
    config = tinyllm.nn.GPTConfig()
    B, T = 16, config.block_size
    model = tinyllm.nn.GPT(config)
    i = np.arange(B * T)
    idx = ((i * 31 + 7) % config.vocab_size).reshape(B, T).astype(np.int32)
    targets = ((i * 17 + 3) % config.vocab_size).reshape(B, T).astype(np.int32)

    def step():
        model.zero_grad()
        model.loss(idx, targets).backward()

    step()
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    start = time.perf_counter()
    for _ in range(rounds):
        step()
    seconds = (time.perf_counter() - start) / rounds
    print(json.dumps({"peer": "tinyllm from Python", "threads": int(os.environ.get("OPENBLAS_NUM_THREADS", "1")),
                      "seconds": seconds, "tokens_per_s": B * T / seconds}))


if __name__ == "__main__":
    main()
