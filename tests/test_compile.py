"""Every op is a torch.library op with a fake: torch.compile(fullgraph=True) traces through them."""
import pytest
import torch

import ltx_kernels as lk

BF16 = torch.bfloat16


def _block(x, c, s, w, weight_q, weight_s, bias, scale, shift):
    q = lk.rms_norm_split_rope(x, c, s, w, backend="torch")
    a, sa = lk.quantize_adanorm(q, scale, shift, backend="torch")
    y = lk.fp8_gemm_nt(a.view(-1, a.shape[-1]), sa, weight_q, weight_s, bias, backend="torch")
    y = y.view(x.shape[0], x.shape[1], -1)
    g, gs = lk.quantize_blockwise(y, backend="torch")
    d = lk.dequantize_blockwise(g, gs, backend="torch")
    p = lk.fp6_unpack(lk.fp6_pack(g.view(torch.uint8)[..., :128] & 0x9F, backend="torch"), 128, backend="torch")
    return d, p


@pytest.mark.parametrize("compile_backend", ["aot_eager"])
def test_fullgraph_compile_matches_eager(compile_backend):
    b, t, nh, dh = 1, 4, 2, 128
    h = nh * dh
    x = torch.randn(b, t, h, dtype=BF16)
    c = torch.randn(b, t, nh, dh // 2, dtype=BF16).swapaxes(1, 2)
    s = torch.randn(b, t, nh, dh // 2, dtype=BF16).swapaxes(1, 2)
    w = torch.rand(h, dtype=BF16)
    wq, ws = lk.quantize_weights_blockwise(torch.randn(256, h))
    bias = torch.randn(256)
    scale = torch.randn(b, 1, h, dtype=BF16) * 0.1
    shift = torch.randn(b, 1, h, dtype=BF16) * 0.1
    args = (x, c, s, w, wq, ws, bias, scale, shift)
    eager = _block(*args)
    compiled = torch.compile(_block, fullgraph=True, backend=compile_backend)(*args)
    for e, o in zip(eager, compiled):
        assert torch.equal(e, o)
