"""All2All soak: many send/gather rounds with uneven, changing token counts, each checked bit for
bit, then a rank that never arrives, then proof that the CUDA context and a fresh group still work.

    python tools/all2all_soak.py --json OUT.json                       # cuda: W = 2, 4, 8 ranks on one GPU
    python tools/all2all_soak.py --processes --worlds 2,4,8 --json OUT.json   # cuda: a process per rank
    python tools/all2all_soak.py --backend torch --rounds 50 --worlds 2,3 --json /tmp/soak.json   # CPU, gloo

``cuda`` hosts all W ranks in this process on one GPU (``All2All.local_ranks``, one stream each);
with ``--processes`` every rank is a process of its own on GPU ``rank % visible GPUs`` (real CUDA
IPC: across GPUs where there are W of them, as ltx-core runs it; otherwise several processes share a
GPU, time-sliced without MPS: slow, a proof of the IPC path, not a speed). ``torch`` runs W gloo
processes on the CPU (the same checks; slow, for a quick run). Every round draws new per-rank token
counts (zeros included) and new data, runs ``send_recv_heads`` and ``gather_heads`` and compares
both outputs of every rank with an oracle built from slices of the inputs (``torch.equal`` on the
bytes). Then rank W-1 withholds its call: the others must raise ``All2AllTimeout`` naming it;
afterwards a plain device op and a fresh group (``--after-rounds`` rounds) must still work. Writes a
JSON summary (rounds, bytes moved, failures, timing, device, versions, date) to ``--json``; exits 1
when anything failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile
import time

# all W ranks' streams need their own hardware queues (ltx_kernels.all2all: local_ranks); before CUDA starts
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("cuda", "torch"), default="cuda")
    p.add_argument("--processes", action="store_true",
                   help="cuda: one process per rank on GPU rank %% visible GPUs (torch: always)")
    p.add_argument("--worlds", default="2,4,8", help="comma-separated world sizes (cuda: <= 8)")
    p.add_argument("--rounds", type=int, default=10000, help="send/gather rounds per world size")
    p.add_argument("--max-tokens", type=int, default=300, help="largest per-rank token count of a round")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16, help="H, divisible by every world size")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--pool", type=int, default=4, help="random source tensors per rank the rounds slice from")
    p.add_argument("--timeout-s", type=float, default=1.0, help="All2All timeout of the withheld-rank phase")
    p.add_argument("--after-rounds", type=int, default=100, help="rounds of the fresh group after the timeout")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="where to write the summary")
    a = p.parse_args(argv)
    a.world_list = [int(w) for w in a.worlds.split(",") if w.strip()]
    if not a.world_list or any(w < 1 for w in a.world_list):
        p.error(f"--worlds must list positive ints, got {a.worlds!r}")
    if any(a.heads % w for w in a.world_list):
        p.error(f"--heads {a.heads} must be divisible by every world size {a.world_list}")
    if a.backend == "cuda" and max(a.world_list) > 8:
        p.error("the cuda backend takes world sizes <= 8")
    if a.rounds < 1 or a.max_tokens < 1 or a.pool < 1:
        p.error("--rounds, --max-tokens and --pool must be >= 1")
    return a


# ---------------------------------------------------------------------------------------------
# Rounds and their oracle (shared by both backends)

def round_counts(rng: random.Random, world: int, max_tokens: int) -> list:
    """Uneven per-rank token counts that change every round: zeros, ones, the maximum, anything."""
    pick = rng.random()
    if pick < 0.1:
        return [0] * world if rng.random() < 0.2 else [rng.choice((0, max_tokens)) for _ in range(world)]
    if pick < 0.2:
        return [rng.choice((0, 1, 2)) for _ in range(world)]
    return [rng.randint(0, max_tokens) for _ in range(world)]


def round_inputs(pool, counts, rng: random.Random):
    """Rank r's input: c_r tokens sliced from one of its pool tensors at a random offset."""
    xs = []
    for r, c in enumerate(counts):
        src = pool[r][rng.randrange(len(pool[r]))]
        off = rng.randint(0, src.shape[1] - c)
        xs.append(src[:, off:off + c])
    return xs


def expected_send_recv(xs, world):
    """Rank t: every rank's tokens, in rank order, of heads t*H/W .. (t+1)*H/W."""
    hpr = xs[0].shape[2] // world
    return [torch.cat([x[:, :, t * hpr:(t + 1) * hpr] for x in xs], dim=1) for t in range(world)]


def same(a, b) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                              b.contiguous().reshape(-1).view(torch.uint8))


def make_pool(args, world, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = DTYPES[args.dtype]
    shape = (args.batch, args.max_tokens + 64, args.heads, args.head_dim)
    return [[(torch.randn(shape, generator=g) * 64).to(dt).to(device) for _ in range(args.pool)]
            for _ in range(world)]


def round_bytes(args, counts) -> int:
    """Bytes written per round over all ranks: send_recv and gather each write every element once."""
    elt = torch.empty((), dtype=DTYPES[args.dtype]).element_size()
    return 2 * args.batch * sum(counts) * args.heads * args.head_dim * elt


# ---------------------------------------------------------------------------------------------
# cuda: every rank in this process, one stream each

def _cuda_ranks(lk, args, world, timeout):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    seqlen = args.batch * args.max_tokens * world
    ranks = lk.All2All.local_ranks(world, seqlen, args.heads * args.head_dim, max(world, sms // world),
                                   DTYPES[args.dtype], timeout)
    return ranks, [torch.cuda.Stream() for _ in ranks]


def _dev_equal(a, b):
    """Bitwise equality as a device bool (no host sync)."""
    if a.shape != b.shape:
        return torch.zeros((), dtype=torch.bool, device=a.device)
    if a.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=a.device)
    return (a.contiguous().reshape(-1).view(torch.uint8) == b.contiguous().reshape(-1).view(torch.uint8)).all()


def _cuda_rounds(lk, args, ranks, streams, world, n_rounds, rng, pool, failures, tag, device="cuda"):
    """n_rounds rounds, every output of every rank compared; the verdicts stay on the device and
    are read every 256 rounds (a read per round would serialise the host with the GPU)."""
    flags = torch.ones(n_rounds, 2, dtype=torch.bool, device=device)
    nbytes, history = 0, []
    for i in range(n_rounds):
        counts = round_counts(rng, world, args.max_tokens)
        for a in ranks:
            a.set_rank_tokens(counts)
        xs = round_inputs(pool, counts, rng)
        ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs, copy_out=True)
        back = lk.All2All.run_local(ranks, streams, "gather_heads", ys, copy_out=True)
        want = expected_send_recv(xs, world)
        flags[i, 0] = torch.stack([_dev_equal(y, w) for y, w in zip(ys, want)]).all()
        flags[i, 1] = torch.stack([_dev_equal(o, x) for o, x in zip(back, xs)]).all()
        history.append(counts)
        nbytes += round_bytes(args, counts)
        if (i + 1) % 256 == 0 or i + 1 == n_rounds:
            for r, which in (~flags[: i + 1]).nonzero().tolist():
                failures.append({"tag": tag, "world": world, "round": r, "op": ("send_recv", "gather")[which],
                                 "counts": history[r]})
            flags[: i + 1] = True
    for a in ranks:
        a.check()
    return nbytes


def run_cuda(args):
    import ltx_kernels as lk

    results, failures = [], []
    for world in args.world_list:
        rng = random.Random(args.seed * 1000 + world)
        pool = make_pool(args, world, "cuda", args.seed * 1000 + world)
        ranks, streams = _cuda_ranks(lk, args, world, 10.0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        nbytes = _cuda_rounds(lk, args, ranks, streams, world, args.rounds, rng, pool, failures, f"W={world}")
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        for a in ranks:
            a.destroy()
        n_fail = sum(f["world"] == world and f["tag"] == f"W={world}" for f in failures)
        results.append({"world": world, "rounds": args.rounds, "failures": n_fail, "bytes_moved": nbytes,
                        "seconds": round(dt, 3), "GB_per_s_host_bound": round(nbytes / dt / 1e9, 2)})
        print(f"W={world}: {args.rounds} rounds, {n_fail} failures, {nbytes / 1e9:.2f} GB moved in {dt:.1f} s",
              flush=True)
    return results, failures, cuda_timeout_phase(lk, args, failures)


def cuda_timeout_phase(lk, args, failures):
    """Rank W-1 never calls; the others must raise All2AllTimeout naming it. Then a plain CUDA op
    and a fresh group of the same size must work."""
    world = max(args.world_list)
    out = {"world": world, "timeout_s": args.timeout_s}
    ranks, streams = _cuda_ranks(lk, args, world, args.timeout_s)
    counts = [min(5, args.max_tokens)] * world
    for a in ranks:
        a.set_rank_tokens(counts)
    pool = make_pool(args, world, "cuda", args.seed + 7)
    xs = round_inputs(pool, counts, random.Random(args.seed))
    t0 = time.perf_counter()
    for r in range(world - 1):
        with torch.cuda.stream(streams[r]):
            ranks[r].send_recv_heads(xs[r])
    peers, errors = [], []
    for r in range(world - 1):
        try:
            with torch.cuda.stream(streams[r]):
                ranks[r].check()
            errors.append(f"rank {r}: no All2AllTimeout")
        except lk.All2AllTimeout as e:
            peers.append(e.peer)
        except Exception as e:  # anything else is a failure of the contract
            errors.append(f"rank {r}: {type(e).__name__}: {e}")
    out["seconds_to_raise"] = round(time.perf_counter() - t0, 3)
    out["peers_named"] = peers
    if any(p != world - 1 for p in peers):
        errors.append(f"the timeouts name peers {peers}, not the withheld rank {world - 1}")
    try:
        ranks[0].send_recv_heads(xs[0])
        errors.append("a timed-out instance accepted another op")
    except lk.All2AllTimeout:
        pass
    # the context is alive: plain work, then a fresh group
    x = torch.randn(1 << 20, device="cuda")
    out["context_ok"] = bool(torch.equal((x * 2).sum(), x.sum() * 2)) and torch.cuda.synchronize() is None
    for a in ranks:
        a.destroy()
    fresh, fs = _cuda_ranks(lk, args, world, 10.0)
    n_before = len(failures)
    out["fresh_group_bytes"] = _cuda_rounds(lk, args, fresh, fs, world, args.after_rounds,
                                            random.Random(args.seed + 1), pool, failures, "fresh group")
    out["fresh_group_rounds"] = args.after_rounds
    out["fresh_group_failures"] = len(failures) - n_before
    for a in fresh:
        a.destroy()
    out["errors"] = errors
    out["ok"] = not errors and out["context_ok"] and out["fresh_group_failures"] == 0
    print(f"timeout phase (W={world}, rank {world - 1} withheld): peers named {peers}, "
          f"{out['seconds_to_raise']} s, context ok {out['context_ok']}, fresh group "
          f"{args.after_rounds} rounds, {out['fresh_group_failures']} failures{', ' + '; '.join(errors) if errors else ''}",
          flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# A process per rank: torch (gloo on the CPU), or cuda (rank r on GPU r % visible GPUs)

def _proc_worker(rank, world, path, args, q):
    import torch.distributed as dist

    import ltx_kernels as lk

    cuda = args.backend == "cuda"
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    rng = random.Random(args.seed * 1000 + world)  # every rank draws the same rounds
    pool = make_pool(args, world, device, args.seed * 1000 + world)
    seqlen = args.batch * args.max_tokens * world
    # ranks sharing a GPU (time-sliced, without MPS) wait for each other: few CTAs each
    sharing = cuda and torch.cuda.device_count() < world
    ctas = max(world, torch.cuda.get_device_properties(device).multi_processor_count // (world if sharing else 2)) \
        if cuda else world

    def comm(timeout, group=None):
        return lk.All2All(rank, world, seqlen, args.heads * args.head_dim, ctas, DTYPES[args.dtype], group=group,
                          timeout_seconds=timeout, backend=args.backend, device=device)

    a2a = comm(60)
    fails, nbytes = [], 0
    t0 = time.perf_counter()
    for i in range(args.rounds):
        counts = round_counts(rng, world, args.max_tokens)
        a2a.set_rank_tokens(counts)
        xs = round_inputs(pool, counts, rng)
        y = a2a.send_recv_heads(xs[rank])
        if not same(y, expected_send_recv(xs, world)[rank]):
            fails.append({"world": world, "round": i, "op": "send_recv", "rank": rank, "counts": counts})
        if not same(a2a.gather_heads(y), xs[rank]):
            fails.append({"world": world, "round": i, "op": "gather", "rank": rank, "counts": counts})
        nbytes += round_bytes(args, counts)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    res = {"world": world, "rank": rank, "rounds": args.rounds, "failures": fails, "bytes_moved": nbytes,
           "seconds": round(dt, 3), "backend": a2a.backend, "device": str(device)}
    # withheld rank: the last one sits out one op; the others must time out naming no one else
    timeout = {"errors": []}
    dist.barrier()
    tmo = comm(args.timeout_s)
    counts = [min(5, args.max_tokens)] * world
    tmo.set_rank_tokens(counts)
    xs = round_inputs(pool, counts, random.Random(args.seed))
    if rank == world - 1:
        time.sleep(args.timeout_s + 2.0)
    else:
        t1 = time.perf_counter()
        try:
            tmo.send_recv_heads(xs[rank])
            tmo.check()  # cuda: the kernel exits on the timeout and the host raises here
            timeout["errors"].append(f"rank {rank}: no All2AllTimeout")
        except lk.All2AllTimeout as e:
            timeout["seconds_to_raise"] = round(time.perf_counter() - t1, 3)
            if cuda and e.peer != world - 1:
                timeout["errors"].append(f"rank {rank}: the timeout names peer {e.peer}, not {world - 1}")
        if cuda:
            x = torch.randn(1 << 20, device=device)
            if not torch.equal((x * 2).sum(), x.sum() * 2):
                timeout["errors"].append(f"rank {rank}: the CUDA context no longer computes")
    # a fresh group over the same ranks (the torch backend wedges the default group's pairs)
    fresh = dist.new_group(list(range(world)), backend="gloo")
    a3 = comm(60, fresh)
    frng = random.Random(args.seed + 1)
    fresh_fail = 0
    for _ in range(args.after_rounds):
        counts = round_counts(frng, world, args.max_tokens)
        a3.set_rank_tokens(counts)
        xs = round_inputs(pool, counts, frng)
        y = a3.send_recv_heads(xs[rank])
        fresh_fail += not same(y, expected_send_recv(xs, world)[rank]) or not same(a3.gather_heads(y), xs[rank])
    timeout["fresh_group_rounds"], timeout["fresh_group_failures"] = args.after_rounds, fresh_fail
    res["timeout"] = timeout
    q.put(res)
    dist.barrier(group=fresh)
    os._exit(0)  # the default group is wedged by the withheld op: skip its teardown


def run_processes(args):
    import torch.multiprocessing as mp

    results, failures, phases = [], [], []
    ctx = mp.get_context("spawn")
    for world in args.world_list:
        q = ctx.SimpleQueue()
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_proc_worker, args=(world, os.path.join(tmp, "rendezvous"), args, q), nprocs=world, join=True)
        per_rank = sorted((q.get() for _ in range(world)), key=lambda r: r["rank"])
        for r in per_rank:
            failures += r["failures"]
        n_fail = sum(len(r["failures"]) for r in per_rank)
        results.append({"world": world, "rounds": args.rounds, "failures": n_fail,
                        "bytes_moved": per_rank[0]["bytes_moved"], "seconds": max(r["seconds"] for r in per_rank),
                        "backend": sorted({r["backend"] for r in per_rank}),
                        "devices": [r["device"] for r in per_rank]})
        errors = [e for r in per_rank for e in r["timeout"]["errors"]]
        fresh_fail = sum(r["timeout"]["fresh_group_failures"] for r in per_rank)
        phases.append({"world": world, "timeout_s": args.timeout_s, "errors": errors,
                       "seconds_to_raise": [r["timeout"].get("seconds_to_raise") for r in per_rank[:-1]],
                       "fresh_group_rounds": args.after_rounds, "fresh_group_failures": fresh_fail,
                       "ok": not errors and fresh_fail == 0})
        print(f"W={world}: {args.rounds} rounds, {n_fail} failures; withheld rank: "
              f"{'ok' if phases[-1]['ok'] else errors}; fresh group {fresh_fail} failures "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    return results, failures, phases


def environment():
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node()}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["sms"] = torch.cuda.get_device_properties(0).multi_processor_count
        env["gpus"] = torch.cuda.device_count()
    else:
        env["device"] = "cpu"
    return env


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.backend == "cuda":
        from ltx_kernels import _ext

        if not torch.cuda.is_available() or _ext.load("_C_all2all")[0] is None:
            print("the cuda backend needs a GPU and the _C_all2all extension "
                  f"({_ext.load('_C_all2all')[1] if torch.cuda.is_available() else 'no GPU'}); "
                  "--backend torch runs on the CPU", file=sys.stderr)
            return 2
    if args.backend == "cuda" and not args.processes:
        results, failures, timeout = run_cuda(args)
        timeouts = [timeout]
    else:
        results, failures, timeouts = run_processes(args)
    ok = not failures and all(t["ok"] for t in timeouts)
    summary = {"tool": "all2all_soak", "ok": ok, "backend": args.backend,
               "processes": args.processes or args.backend == "torch", "dtype": args.dtype,
               "shape": {"batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
                         "max_tokens_per_rank": args.max_tokens},
               "rounds_per_world": args.rounds, "results": results,
               "total_rounds": sum(r["rounds"] for r in results),
               "total_bytes_moved": sum(r["bytes_moved"] for r in results),
               "failures": failures[:100], "failure_count": len(failures), "withheld_rank": timeouts,
               **environment()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(f"{'OK' if ok else 'FAILED'}: {summary['total_rounds']} rounds, {len(failures)} failures, "
          f"{summary['total_bytes_moved'] / 1e9:.2f} GB moved" + (f"; summary in {args.json}" if args.json else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
