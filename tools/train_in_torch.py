#!/usr/bin/python3
"""A differential test of `tinyllm train` against nanoGPT-style training in
PyTorch (tools/torch_gpt.py's GPT, float64): both start from the same
weights (`tinyllm train --steps 0 --save` writes them), train on the same
batches (docs/DESIGN.md's data order (section 4) on the training part of the split), at
nanoGPT's get_lr, clipped by torch.nn.utils.clip_grad_norm_, with
torch.optim.AdamW in nanoGPT's two groups (or one, for --decay-all); every
step's loss, lr and gradient norm, each validation loss, and the final
parameters and AdamW moments must agree to TOLERANCE. Then, so that the
agreement means something, PyTorch trained the wrong way (one group, a
constant lr, another min lr, no clipping, other validation windows, the
validation loss before the update) must disagree by far more than that.

  tools/train_in_torch.py build/tinyllm [two-groups|decay-all|constant|zero3-world2]

CTest runs each case as TorchTrainTest.* (tests/CMakeLists.txt)."""
import json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch
import torch_train as tt
from torch_gpt import GPT

# Relative to each figure's size. Float64 on both sides lands within 1.2e-12
# (the largest, in the final parameters, where AdamW's division by the root
# of tiny second moments magnifies rounding; the losses agree to 1e-15);
# every run prints its figures.
TOLERANCE = 5e-12
# A wrong training must miss by at least this many tolerances.
WRONG_BY = 1e3

# One setting, read by both sides. Steps 0-2 warm up, 3-9 follow the cosine,
# 10-11 sit at min_lr; the validation loss is due after steps 4, 9 and 11
# (the last). The clip is chosen so that some steps clip and some do not.
SETTINGS = dict(data="/usr/share/common-licenses/GPL-3", layers=2, heads=2, width=32, seq=32, batch=4, steps=12,
                lr=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, schedule="cosine", warmup_steps=3,
                decay_steps=9, min_lr=1e-3, clip=2.0, val_fraction=0.1, eval_every=5, eval_batches=2, seed=1337,
                world=1, zero=0)

CASES = {
    # nanoGPT's training: decay on the matrices and embeddings only.
    "two-groups": dict(decay_all=False),
    # --decay-all against one AdamW group, every validation window.
    "decay-all": dict(decay_all=True, eval_batches=0),
    # The training before schedules: a constant lr, no clipping.
    "constant": dict(decay_all=False, schedule="constant", clip=0.0),
    # nanoGPT's training on two ranks of ZeRO stage 3: the same training.
    "zero3-world2": dict(decay_all=False, world=2, zero=3),
}


def flags(s):
    names = ["data", "layers", "heads", "width", "seq", "batch", "steps", "lr", "weight_decay", "beta1", "beta2", "eps",
             "schedule", "warmup_steps", "decay_steps", "min_lr", "clip", "val_fraction", "eval_every",
             "eval_batches", "seed", "world", "zero"]
    if s["schedule"] == "constant":  # tinyllm refuses the cosine's own flags beside it
        names = [n for n in names if n not in ("warmup_steps", "decay_steps", "min_lr")]
    out = [f"--{n.replace('_', '-')}={s[n]}" for n in names] + ["--backend=threads"]
    return out + (["--decay-all"] if s["decay_all"] else [])


def run_tinyllm(binary, s, work):
    """The start checkpoint, the metrics (step lines and val lines) and the final checkpoint."""
    subprocess.run([binary, "train", *flags(dict(s, steps=0)), "--save", f"{work}/start"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([binary, "train", *flags(s), "--save", f"{work}/run", "--metrics", f"{work}/m.jsonl"], check=True,
                   stdout=subprocess.DEVNULL)
    steps, vals = {}, {}
    for line in open(f"{work}/m.jsonl"):
        j = json.loads(line)
        (vals if "val_loss" in j else steps)[j["step"]] = j
    return (f"{work}/start/step-00000000.safetensors", steps, vals,
            f"{work}/run/step-{s['steps']:08d}.safetensors")


def run_torch(start, s):
    """s's training in PyTorch from the start checkpoint: per step
    {loss, lr, grad_norm}, {step: val_loss}, and {name: tensor} of the
    parameters and AdamW moments in the checkpoint's names."""
    weights, meta = tt.read_checkpoint(start)
    model = GPT(V=int(meta["vocab_size"]), T=s["seq"], L=s["layers"], H=s["heads"], C=s["width"]).double()
    model.load_state_dict({k: v for k, v in weights.items() if not k.endswith((".exp_avg", ".exp_avg_sq"))},
                          strict=True)
    opt = torch.optim.AdamW(tt.param_groups(model, s["weight_decay"], s["decay_all"]), lr=s["lr"],
                            betas=(s["beta1"], s["beta2"]), eps=s["eps"])
    train, val = tt.split(tt.load_tokens(s["data"]), s["val_fraction"])
    B, T = s["batch"], s["seq"]
    steps, vals = {}, {}
    for step in range(s["steps"]):
        lr = s["lr"]
        if s["schedule"] == "cosine":
            lr = tt.get_lr(step, s["lr"], s["warmup_steps"], s["decay_steps"], s["min_lr"])
        opt.zero_grad(set_to_none=True)
        loss = model(*tt.batch(train, step, B, T))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"]).item() if s["clip"] > 0 else None
        for group in opt.param_groups:
            group["lr"] = lr
        due = (step + 1) % s["eval_every"] == 0 or step + 1 == s["steps"]  # the last step is always evaluated
        if due and s.get("eval_before_update"):
            vals[step] = dict(val_loss=tt.val_loss(model, val, B, T, s["eval_batches"]))
        opt.step()
        steps[step] = dict(loss=loss.item(), lr=lr, grad_norm=norm)
        if due and not s.get("eval_before_update"):
            vals[step] = dict(val_loss=tt.val_loss(model, val, B, T, s["eval_batches"]))
    state = {}
    for name, p in model.named_parameters():
        state[name] = p.detach()
        state[name + ".exp_avg"] = opt.state[p]["exp_avg"]
        state[name + ".exp_avg_sq"] = opt.state[p]["exp_avg_sq"]
    return steps, vals, state


def rel(a, b):
    """|a - b| relative to the larger size of the two (of a tensor: its largest entry); 0 for two zeros.
    None (a norm neither run computed) equals only None."""
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    if isinstance(b, torch.Tensor):
        d = (a - b).abs().max().item()
        a, b = a.abs().max().item(), b.abs().max().item()
        return 0.0 if d == 0 else d / max(a, b)
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def differences(ours, theirs):
    """The largest relative difference of each kind between tinyllm's run and a torch run."""
    steps, vals, final = ours
    t_steps, t_vals, t_state = theirs
    if sorted(vals) != sorted(t_vals) or sorted(steps) != sorted(t_steps):
        raise SystemExit(f"steps or evaluations differ: tinyllm {sorted(steps)} {sorted(vals)}, "
                         f"torch {sorted(t_steps)} {sorted(t_vals)}")
    # Without clipping neither run computes the norm (tinyllm's metrics leave the key out).
    out = {k: max(rel(steps[i].get(k), t_steps[i][k]) for i in steps) for k in ("loss", "lr", "grad_norm")}
    out["val_loss"] = max(rel(vals[i]["val_loss"], t_vals[i]["val_loss"]) for i in vals)
    weights, _ = tt.read_checkpoint(final)
    if sorted(weights) != sorted(t_state):
        raise SystemExit(f"checkpoint names differ from torch's: {sorted(set(weights) ^ set(t_state))}")
    region = lambda name: name.rsplit(".", 1)[1] if name.endswith((".exp_avg", ".exp_avg_sq")) else "params"
    for r in ("params", "exp_avg", "exp_avg_sq"):
        out[r] = max(rel(weights[n], t_state[n]) for n in weights if region(n) == r)
    return out


def main():
    binary = sys.argv[1]
    case = sys.argv[2] if len(sys.argv) > 2 else "two-groups"
    s = dict(SETTINGS, **CASES[case])
    with tempfile.TemporaryDirectory(prefix="tinyllm-torch-") as work:
        start, steps, vals, final = run_tinyllm(binary, s, work)
        ours = (steps, vals, final)
        same = differences(ours, run_torch(start, s))
        worst = max(same.values())
        print(f"{case}: tinyllm against PyTorch, the largest relative difference of each: " +
              ", ".join(f"{k} {v:.2e}" for k, v in same.items()))
        ok = worst <= TOLERANCE
        if s["clip"] > 0:  # the clip must have acted on some steps and not on others
            norms = [steps[i]["grad_norm"] for i in steps]
            clipped = sum(n > s["clip"] for n in norms)
            print(f"  gradient norms {min(norms):.3f} to {max(norms):.3f}: {clipped} of {len(norms)} steps clipped")
            ok = ok and 0 < clipped < len(norms)

        # Each wrong training, and the figure it must miss by.
        wrong = {"the other AdamW grouping": (dict(decay_all=not s["decay_all"]), "params"),
                 "the validation windows of another --eval-batches":
                     (dict(eval_batches=1 if s["eval_batches"] != 1 else 0), "val_loss"),
                 "the validation loss before the step's update": (dict(eval_before_update=True), "val_loss")}
        if s["schedule"] == "cosine":
            wrong["a constant lr"] = (dict(schedule="constant"), "params")
            wrong["a cosine down to 0"] = (dict(min_lr=0.0), "lr")
        if s["clip"] > 0:
            wrong["no clipping"] = (dict(clip=0.0), "params")
        for what, (change, figure) in wrong.items():
            d = differences(ours, run_torch(start, dict(s, **change)))[figure]
            print(f"  PyTorch with {what}: {figure} differs by {d:.2e}")
            ok = ok and d > WRONG_BY * TOLERANCE
    print(f"{'passed' if ok else 'FAILED'}: within {TOLERANCE:.0e} (largest {worst:.2e}); "
          f"each wrong training off by more than {WRONG_BY * TOLERANCE:.0e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
