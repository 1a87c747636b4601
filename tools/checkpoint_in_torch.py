#!/usr/bin/python3
"""Cross-check, by hand (PyTorch is never needed to build or test): a tinyllm
checkpoint read with nothing but the safetensors format (u64 header length,
JSON header, little-endian F64 data) loads into tools/torch_gpt.py's GPT
with every key matched, and gives the loss tinyllm reports for the next
step's batch (DESIGN.md's data order).

  tinyllm train --save ck --steps 2 ... && tinyllm train --resume ck --steps 3 --metrics m.jsonl
  tools/checkpoint_in_torch.py ck/step-00000002.safetensors [DATA]   # prints the loss of step 3
"""
import json, os, struct, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT


def main():
    path = sys.argv[1]
    data_path = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/common-licenses/GPL-3"
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    state = {name: torch.from_numpy(np.frombuffer(data[a:b], dtype="<f8").reshape(e["shape"]).copy())
             for name, e in header.items() for a, b in [e["data_offsets"]]
             if not name.endswith((".exp_avg", ".exp_avg_sq"))}
    V, T, L, H, C = (int(meta[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"))
    model = GPT(V=V, T=T, L=L, H=H, C=C).double()
    model.load_state_dict(state, strict=True)
    tokens = np.frombuffer(open(data_path, "rb").read(), dtype=np.uint8).astype(np.int64)
    step, B = int(meta["step"]), int(meta["batch"])
    windows = (len(tokens) - 1) // T
    starts = [((step * B + j) % windows) * T for j in range(B)]
    x = torch.tensor(np.stack([tokens[s:s + T] for s in starts]))
    y = torch.tensor(np.stack([tokens[s + 1:s + T + 1] for s in starts]))
    with torch.no_grad():
        print(json.dumps({"step": step + 1, "loss": model(x, y).item()}))


if __name__ == "__main__":
    main()
