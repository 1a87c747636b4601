#!/usr/bin/python3
"""Cross-check, by hand (PyTorch is never needed to build): a tinyllm
checkpoint read with nothing but the safetensors format (u64 header length,
JSON header, little-endian F64 data) loads into tools/torch_gpt.py's GPT
with every key matched, and gives the loss tinyllm reports for the next
step's batch (docs/DESIGN.md's data order (section 4) on the training part of the split,
at the checkpoint's val_fraction unless given, as --resume takes it). The
training part must be the checkpoint's: its data_tokens and data_fnv1a,
the FNV-1a computed here independently, where the checkpoint has them.

  tinyllm train --save ck --steps 2 ... && tinyllm train --resume ck --steps 3 --metrics m.jsonl
  tools/checkpoint_in_torch.py ck/step-00000002.safetensors [DATA [VAL_FRACTION]]   # prints the loss of step 3
"""
import json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train as tt
from torch_gpt import GPT


def fnv1a(tokens):
    """FNV-1a, 64 bits, of the tokens as bytes."""
    h = 14695981039346656037
    for b in tokens.to(torch.uint8).numpy().tobytes():
        h = ((h ^ b) * 1099511628211) % (1 << 64)
    return h


def main():
    path = sys.argv[1]
    tensors, meta = tt.read_checkpoint(path)
    data_path = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/common-licenses/GPL-3"
    val_fraction = float(sys.argv[3] if len(sys.argv) > 3 else meta.get("val_fraction", 0.1))
    state = {name: t for name, t in tensors.items() if not name.endswith((".exp_avg", ".exp_avg_sq"))}
    V, T, L, H, C = (int(meta[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"))
    model = GPT(V=V, T=T, L=L, H=H, C=C).double()
    model.load_state_dict(state, strict=True)
    train, _ = tt.split(tt.load_tokens(data_path), val_fraction)
    if "data_tokens" in meta and (int(meta["data_tokens"]), int(meta["data_fnv1a"], 16)) != (train.numel(), fnv1a(train)):
        sys.exit(f"{path} was trained on {meta['data_tokens']} tokens with FNV-1a {meta['data_fnv1a']}, "
                 f"but {data_path} at val_fraction {val_fraction} gives {train.numel()} with {fnv1a(train):016x}")
    step, B = int(meta["step"]), int(meta["batch"])
    with torch.no_grad():
        print(json.dumps({"step": step + 1, "loss": model(*tt.batch(train, step, B, T)).item()}))


if __name__ == "__main__":
    main()
