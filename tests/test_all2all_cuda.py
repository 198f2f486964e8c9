"""All2All "cuda" backend (CUDA-IPC kernels) on one GPU: one process hosting W ranks on W streams,
W processes sharing the GPU through real CUDA IPC, the timeout path, CUDA-graph capture."""
import os
import tempfile

import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _ext
from ltx_kernels import reference as ref

from helpers import run_local_checked

FP8 = torch.float8_e4m3fn
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or _ext.load("_C_all2all")[0] is None,
    reason="needs a GPU and the _C_all2all extension")
UNEVEN = {2: [700, 324], 4: [256, 1, 300, 211], 8: [64, 0, 33, 128, 100, 5, 64, 90]}


def _same(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _local(world, seqlen, hidden, dtype, timeout=10.0):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ranks = lk.All2All.local_ranks(world, seqlen, hidden, max(world, sms // world), dtype, timeout)
    return ranks, [torch.cuda.Stream() for _ in range(world)]


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8])
@pytest.mark.parametrize("b", [1, 2])
def test_local_ranks_layouts_and_round_trips(world, dtype, b):
    counts = UNEVEN[world]
    h, d = 32, 128 if dtype == torch.bfloat16 else 72
    ranks, streams = _local(world, b * sum(counts), h * d, dtype)
    for a in ranks:
        a.set_rank_tokens(counts)
    xs = [(torch.randn(b, c, h, d, device="cuda") * 50).to(dtype) for c in counts]
    for it in range(3):  # back-to-back ops on the same instances
        ys = run_local_checked(ranks, streams, "send_recv_heads", xs, copy_out=True)
        want = ref.send_recv_heads(xs)
        assert all(_same(y, w) for y, w in zip(ys, want)), it
        back = run_local_checked(ranks, streams, "gather_heads", ys)
        assert all(_same(o, x) for o, x in zip(back, xs)), it
        ag = run_local_checked(ranks, streams, "allgather", xs)
        assert all(_same(o, w) for o, w in zip(ag, ref.allgather(xs))), it
    for a in ranks:
        a.destroy()


def test_an_output_view_fed_back_as_input():
    """copy_out=False returns a view of the rank's own buffer; fed straight back (gather_heads of
    send_recv_heads), the peers would write that buffer while this rank reads it: such an input is
    copied first."""
    counts = UNEVEN[4]
    ranks, streams = _local(4, sum(counts), 32 * 128, torch.bfloat16)
    for a in ranks:
        a.set_rank_tokens(counts)
    xs = [torch.randn(1, c, 32, 128, device="cuda").to(torch.bfloat16) for c in counts]
    for it in range(3):
        ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)  # views of the buffers
        back = lk.All2All.run_local(ranks, streams, "gather_heads", ys, copy_out=True)
        torch.cuda.synchronize()
        assert all(_same(o, x) for o, x in zip(back, xs)), it
    for a in ranks:
        a.destroy()


def test_ranks_that_disagree_on_the_token_counts_raise():
    """Rank 0 told [3, 5] tokens, rank 1 [4, 4]: the kernels would exchange wrong rows; each
    rank's kernel compares the op signatures and both raise, naming the other."""
    ranks, streams = _local(2, 64, 256, torch.bfloat16, timeout=2.0)
    ranks[0].set_rank_tokens([3, 5])
    ranks[1].set_rank_tokens([4, 4])
    xs = [torch.randn(1, 3, 2, 128, device="cuda").to(torch.bfloat16),
          torch.randn(1, 4, 2, 128, device="cuda").to(torch.bfloat16)]
    lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)
    for r in (0, 1):
        with pytest.raises(lk.All2AllTimeout, match="ran another op, shape or token counts") as e:
            with torch.cuda.stream(streams[r]):
                ranks[r].check()
        assert e.value.peer == 1 - r
    torch.cuda.synchronize()


def test_odd_row_bytes_and_views():
    ranks, streams = _local(2, 64, 3 * 2 * 5, FP8)
    for a in ranks:
        a.set_rank_tokens([3, 4])
    xs = [torch.randn(1, c, 2, 5, device="cuda").to(FP8) for c in (3, 4)]  # 5-byte rows
    ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)
    assert all(_same(y, w) for y, w in zip(ys, ref.send_recv_heads(xs)))
    for a in ranks:
        a.destroy()


def test_timeout_exits_kernel_and_context_survives():
    ranks, streams = _local(2, 64, 256, torch.bfloat16, timeout=0.3)
    x = torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    with torch.cuda.stream(streams[0]):
        ranks[0].send_recv_heads(x)  # rank 1 never calls
    with pytest.raises(lk.All2AllTimeout, match="peer rank 1 did not arrive") as e:
        with torch.cuda.stream(streams[0]):
            ranks[0].check()
    assert e.value.peer == 1
    with pytest.raises(lk.All2AllTimeout, match="unusable|did not arrive"):
        ranks[0].send_recv_heads(x)
    # the context is alive: plain work and a fresh group both run
    assert torch.equal((x.float() * 2).sum(), x.float().sum() * 2)
    torch.cuda.synchronize()
    fresh, fs = _local(2, 64, 256, torch.bfloat16)
    xs = [x, x + 1]
    ys = lk.All2All.run_local(fresh, fs, "send_recv_heads", xs)
    assert all(_same(y, w) for y, w in zip(ys, ref.send_recv_heads(xs)))
    for a in ranks + fresh:
        a.destroy()


def test_cuda_graph_capture_and_replay():
    world, counts = 2, [100, 60]
    ranks, streams = _local(world, sum(counts), 8 * 128, torch.bfloat16)
    for a in ranks:
        a.set_rank_tokens(counts)
    xs = [torch.randn(1, c, 8, 128, device="cuda", dtype=torch.bfloat16) for c in counts]
    lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)  # warm
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    main = torch.cuda.Stream()
    with torch.cuda.graph(g, stream=main):
        ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs, copy_out=True)
        back = lk.All2All.run_local(ranks, streams, "gather_heads", ys, copy_out=True)
    for it in range(3):  # epochs advance on the device, so replays stay in step
        for x in xs:
            x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert all(_same(y, w) for y, w in zip(ys, ref.send_recv_heads(xs))), it
        assert all(_same(o, x) for o, x in zip(back, xs)), it
    for a in ranks:
        a.check()
        a.destroy()


def _ipc_worker(rank, world, path, q):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    torch.cuda.set_device(0)
    counts = [5, 9, 2, 7][:world]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a2a = lk.All2All(rank, world, sum(counts), 4 * 64, max(world, sms // world), torch.bfloat16,
                     timeout_seconds=60, backend="cuda")
    a2a.set_rank_tokens(counts)
    g = torch.Generator(device="cuda").manual_seed(7)
    xs = [torch.randn(1, c, 4, 64, device="cuda", generator=g, dtype=torch.bfloat16) for c in counts]
    import time

    t0 = time.perf_counter()
    y = a2a.send_recv_heads(xs[rank], copy_out=True)
    back = a2a.gather_heads(y, copy_out=True)
    a2a.check()
    ms = (time.perf_counter() - t0) * 1e3
    ok = _same(y, ref.send_recv_heads(xs)[rank]) and _same(back, xs[rank])
    dist.barrier()
    a2a.destroy()
    q.put((rank, ok, ms))
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_processes_sharing_one_gpu_through_cuda_ipc(world):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_ipc_worker, args=(world, os.path.join(tmp, "rdzv"), q), nprocs=world, join=True)
    res = sorted(q.get() for _ in range(world))
    print(f"\nW={world} processes on one GPU (send+gather, host ms per rank): {[round(r[2], 2) for r in res]}")
    assert all(r[1] for r in res), res
