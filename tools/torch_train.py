"""nanoGPT's training pieces in PyTorch, in tinyllm's conventions, for the
peers that train beside `tinyllm train`: docs/DESIGN.md's data order (section 4)
(include/tinyllm/train/data.h), the train/validation split and the
validation loss (src/train/evaluate.cpp), nanoGPT's get_lr, its two AdamW
groups, and a checkpoint read by the safetensors format alone. Imported by
tools/train_in_torch.py, tools/checkpoint_in_torch.py and
bench/train_torch.py; never by the build."""
import json, math, struct

import numpy as np
import torch


def load_tokens(path):
    """Token i is byte i of the file."""
    with open(path, "rb") as f:
        return torch.tensor(np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64))


def split(tokens, val_fraction):
    """Corpus::split: the first floor((1 - F)·N) tokens train, the rest
    validate (the same double arithmetic as the C++, so the same cut)."""
    n = math.floor((1 - val_fraction) * float(tokens.numel()))
    return tokens[:n], tokens[n:]


def num_windows(tokens, T):
    return (tokens.numel() - 1) // T


def rows(tokens, windows, T):
    """Windows w as rows: inputs tokens [w·T, w·T + T), targets one later."""
    r = tokens[windows[:, None] * T + torch.arange(T + 1)]  # [len(windows), T+1]
    return r[:, :T].contiguous(), r[:, 1:].contiguous()


def batch(tokens, step, B, T, lo=0, hi=None):
    """Rows [lo, hi) of step `step`'s global batch: windows (s·B + j) mod W."""
    hi = B if hi is None else hi
    return rows(tokens, (step * B + torch.arange(lo, hi)) % num_windows(tokens, T), T)


def get_lr(step, lr, warmup, decay, min_lr):
    """nanoGPT's get_lr for step s from 0 (tinyllm's --schedule cosine)."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def param_groups(model, weight_decay, decay_all=False):
    """nanoGPT's configure_optimizers: decay the tensors of two or more
    dimensions (matrices, embeddings), not biases and LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    if decay_all:
        return [{"params": params, "weight_decay": weight_decay}]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


@torch.no_grad()
def val_loss(model, val, B, T, eval_batches):
    """The mean over the first eval_batches·B validation windows (0: all) of
    each window's mean cross-entropy. The windows are equally long, so this
    is the mean over all their tokens."""
    windows = num_windows(val, T)
    if eval_batches:
        windows = min(windows, eval_batches * B)
    return model(*rows(val, torch.arange(windows), T)).item()


def read_checkpoint(path):
    """A tinyllm checkpoint by the format alone (u64 header length, JSON
    header, little-endian F64 data): ({name: float64 tensor}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    tensors = {name: torch.from_numpy(np.frombuffer(data[a:b], dtype="<f8").reshape(e["shape"]).copy())
               for name, e in header.items() for a, b in [e["data_offsets"]]}
    return tensors, meta
