#!/usr/bin/python3
"""The PyTorch peer for bench/train_vs_torch.sh: data-parallel training of
tools/torch_gpt.py's GPT (float64) over P processes on this machine (gloo),
the same training as `tinyllm train`'s defaults (tools/torch_train.py:
docs/DESIGN.md's data order (section 4) on the training part of --val-fraction's split,
nanoGPT's get_lr with tinyllm's default warmup and min lr, AdamW in
nanoGPT's two groups, clip_grad_norm_ at --clip), timed like `tinyllm train
--metrics`; it does not evaluate.

  bench/train_torch.py --world 2 --mode zero1 --steps 12 --data FILE

Modes: ddp = DistributedDataParallel + AdamW; zero1 = DDP +
ZeroRedundancyOptimizer(AdamW). zero2/zero3 use FSDP (SHARD_GRAD_OP /
FULL_SHARD) where torch runs it on the CPU; torch 1.13's FSDP refuses
CPU-only execution (and does not import on Python 3.11), so there they fall
back to zero1's ZeroRedundancyOptimizer, and the "peer" field says so
(the FSDP path, with use_orig_params for the two groups, has not run here).
The ranks share the cores: each gets max(1, cores // P) OpenBLAS threads
(set in the environment before torch is imported: torch's own setting does
not reach OpenBLAS) and one torch intra-op thread, the fastest split here
(see bench/gpt_torch.py). tokens/s = (steps - 2) * B * T / wall time of the
steps after 2 warm-up steps, on rank 0 between barriers. Prints one JSON
line with each rank's peak RSS (ru_maxrss)."""
import argparse, json, os, resource, socket, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))


def cores():
    return len(os.sched_getaffinity(0))


def fsdp_class():
    """FSDP if this torch can run it on the CPU, else None."""
    import torch
    major = int(torch.__version__.split(".")[0])
    if major < 2 and not torch.cuda.is_available():  # 1.x: "FSDP does not support CPU only execution"
        return None
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        return FullyShardedDataParallel
    except Exception:
        return None


def rank_main(rank, a, port):
    import torch  # first here: OPENBLAS_NUM_THREADS is already in the environment
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.optim import ZeroRedundancyOptimizer
    import torch_train as tt
    from torch_gpt import GPT

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    P, B, T = a.world, a.batch, a.seq
    torch.manual_seed(a.seed)
    model = GPT(T=T, L=a.layers, H=a.heads, C=a.width).double()
    hyper = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    FSDP = fsdp_class() if a.mode in ("zero2", "zero3") else None
    if FSDP is not None:
        from torch.distributed.fsdp import ShardingStrategy
        strategy = ShardingStrategy.SHARD_GRAD_OP if a.mode == "zero2" else ShardingStrategy.FULL_SHARD
        model = FSDP(model, sharding_strategy=strategy, device_id=torch.device("cpu"), use_orig_params=True)
        opt = torch.optim.AdamW(tt.param_groups(model, 0.1), **hyper)
        clip = model.clip_grad_norm_  # the norm over every rank's shards
        peer = f"FSDP {strategy.name}"
    else:
        model = DDP(model)  # broadcasts rank 0's parameters
        groups = tt.param_groups(model, 0.1)
        if a.mode == "ddp":
            opt = torch.optim.AdamW(groups, **hyper)
            peer = "DDP"
        else:
            opt = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, **hyper)
            peer = "DDP + ZeroRedundancyOptimizer" + (" (no FSDP on CPU)" if a.mode != "zero1" else "")
        # DDP leaves every rank the whole averaged gradient, so the local norm is the global one.
        clip = lambda limit: torch.nn.utils.clip_grad_norm_(model.parameters(), limit)

    tokens, _ = tt.split(tt.load_tokens(a.data), a.val_fraction)
    lo, hi = rank * B // P, (rank + 1) * B // P

    def step(s):
        opt.zero_grad(set_to_none=True)
        model(*tt.batch(tokens, s, B, T, lo, hi)).backward()
        if a.clip > 0:
            clip(a.clip)
        lr = tt.get_lr(s, a.lr, a.steps // 20, a.steps, a.lr / 10)  # tinyllm's default schedule
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()

    warmup = 2
    for s in range(warmup):
        step(s)
    dist.barrier()
    start = time.perf_counter()
    for s in range(warmup, a.steps):
        step(s)
    dist.barrier()
    seconds = time.perf_counter() - start
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.int64)
    all_rss = [torch.zeros_like(rss) for _ in range(P)]
    dist.all_gather(all_rss, rss)
    if rank == 0:
        print(json.dumps({"peer": f"pytorch {torch.__version__} {peer}", "world": P, "mode": a.mode,
                          "threads_per_rank": int(os.environ["OPENBLAS_NUM_THREADS"]),
                          "tokens_per_s": (a.steps - warmup) * B * T / seconds,
                          "peak_rss_bytes": [int(r.item()) for r in all_rss]}), flush=True)
    dist.barrier()
    os._exit(0)  # torch 1.13 sometimes hangs tearing down DDP and gloo at world 4; nothing is left to do


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--mode", choices=["ddp", "zero1", "zero2", "zero3"], default="ddp")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    if a.batch % a.world or a.steps <= 2:
        sys.exit("train_torch.py: --batch must divide by --world and --steps be > 2")
    # Before torch is imported (the spawned children inherit the environment).
    os.environ["OPENBLAS_NUM_THREADS"] = str(max(1, cores() // a.world))
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.multiprocessing
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(rank_main, args=(a, port), nprocs=a.world)


sys.path.insert(0, os.path.join(HERE, "..", "tools"))

if __name__ == "__main__":
    main()
