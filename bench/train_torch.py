#!/usr/bin/python3
"""The PyTorch peer for bench/train_vs_torch.sh: data-parallel training of
tools/torch_gpt.py's GPT (float64, AdamW) over P processes on this machine
(gloo), with DESIGN.md's data order, timed like `tinyllm train --metrics`.

  bench/train_torch.py --world 2 --mode zero1 --steps 12 --data FILE

Modes: ddp = DistributedDataParallel + AdamW; zero1 = DDP +
ZeroRedundancyOptimizer(AdamW). zero2/zero3 use FSDP (SHARD_GRAD_OP /
FULL_SHARD) where torch runs it on the CPU; torch 1.13's FSDP refuses
CPU-only execution (and does not import on Python 3.11), so there they fall
back to zero1's ZeroRedundancyOptimizer, and the "peer" field says so.
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
    from torch_gpt import GPT

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    P, B, T = a.world, a.batch, a.seq
    torch.manual_seed(a.seed)
    model = GPT(T=T, L=a.layers, H=a.heads, C=a.width).double()
    hyper = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    FSDP = fsdp_class() if a.mode in ("zero2", "zero3") else None
    if FSDP is not None:
        from torch.distributed.fsdp import ShardingStrategy
        strategy = ShardingStrategy.SHARD_GRAD_OP if a.mode == "zero2" else ShardingStrategy.FULL_SHARD
        model = FSDP(model, sharding_strategy=strategy, device_id=torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters(), **hyper)
        peer = f"FSDP {strategy.name}"
    else:
        model = DDP(model)  # broadcasts rank 0's parameters
        if a.mode == "ddp":
            opt = torch.optim.AdamW(model.parameters(), **hyper)
            peer = "DDP"
        else:
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **hyper)
            peer = "DDP + ZeroRedundancyOptimizer" + (" (no FSDP on CPU)" if a.mode != "zero1" else "")

    with open(a.data, "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.int64)
    W = (tokens.numel() - 1) // T
    offsets = torch.arange(T + 1)
    lo, hi = rank * B // P, (rank + 1) * B // P

    def step(s):
        windows = (s * B + torch.arange(lo, hi)) % W
        rows = tokens[windows[:, None] * T + offsets]  # [B/P, T+1]
        opt.zero_grad(set_to_none=True)
        model(rows[:, :T].contiguous(), rows[:, 1:].contiguous()).backward()
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
