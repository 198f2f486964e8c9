"""All2All on one GPU: W ranks in one process (W streams), send_recv_heads + gather_heads of
[1, 32768/W, 32, 128] bf16 per rank. Every byte is read once and written once per op, so the
floor is the device copy of the same bytes, measured in the same run (anchor "copy")."""
import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _ext

pytestmark = pytest.mark.skipif(_ext.load("_C_all2all")[0] is None, reason="_C_all2all not built")


@pytest.mark.parametrize("tokens", [8192, 32768])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_all2all_send_gather(rec, world, tokens):
    h, d = 32, 128
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ranks = lk.All2All.local_ranks(world, tokens // world, h * d, sms // world, torch.bfloat16)
    streams = [torch.cuda.Stream() for _ in range(world)]
    xs = [torch.randn(1, tokens // world, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(world)]
    ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)
    ys = [y.clone() for y in ys]  # gather reads its own copy, the buffer is rewritten

    def step():
        lk.All2All.run_local(ranks, streams, "send_recv_heads", xs)
        lk.All2All.run_local(ranks, streams, "gather_heads", ys)

    total = tokens * h * d * 2
    src = torch.randn(total // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    rec.measure(step, nbytes=2 * 2 * total, anchors={"copy": lambda: (dst.copy_(src), dst.copy_(src))},
                op="all2all send+gather", shape=f"W={world} [1,{tokens}/W,{h},{d}]", backend="cuda")
    for a in ranks:
        a.check()
        a.destroy()
