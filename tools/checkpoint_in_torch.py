#!/usr/bin/python3
"""Cross-check, by hand (PyTorch is never needed to build): a tinyllm
checkpoint read with nothing but the safetensors format (u64 header length,
JSON header, little-endian F64 data) loads into tools/torch_gpt.py's GPT
with every key matched, and gives the loss tinyllm reports for the next
step's batch (docs/DESIGN.md's data order (section 4) on the training part of the split,
--val-fraction 0.1 by default as in the trainer).

  tinyllm train --save ck --steps 2 ... && tinyllm train --resume ck --steps 3 --metrics m.jsonl
  tools/checkpoint_in_torch.py ck/step-00000002.safetensors [DATA [VAL_FRACTION]]   # prints the loss of step 3
"""
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train as tt
from torch_gpt import GPT


def main():
    path = sys.argv[1]
    data_path = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/common-licenses/GPL-3"
    val_fraction = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
    tensors, meta = tt.read_checkpoint(path)
    state = {name: t for name, t in tensors.items() if not name.endswith((".exp_avg", ".exp_avg_sq"))}
    V, T, L, H, C = (int(meta[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"))
    model = GPT(V=V, T=T, L=L, H=H, C=C).double()
    model.load_state_dict(state, strict=True)
    train, _ = tt.split(tt.load_tokens(data_path), val_fraction)
    step, B = int(meta["step"]), int(meta["batch"])
    with torch.no_grad():
        print(json.dumps({"step": step + 1, "loss": model(*tt.batch(train, step, B, T)).item()}))


if __name__ == "__main__":
    main()
