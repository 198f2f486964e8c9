"""Every op is a torch.library op with a fake, so torch.compile(fullgraph=True) traces through it.

The fakes are checked against the kernels' own outputs (torch.library.opcheck: shapes, strides,
dtypes, aliasing, and the op under AOT dispatch), and a compiled chain of ops is checked against
a float64 oracle written here, not against its own eager run."""
import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch

from helpers import assert_rounded_close, rel_err

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
OPS = torch.ops.ltx_kernels


def _cases(device, backend):
    b, t, nh, dh = 1, 4, 2, 128
    h = nh * dh
    x = torch.randn(b, t, h, device=device, dtype=BF16)
    cs = torch.randn(b, t, nh, dh // 2, device=device, dtype=BF16).swapaxes(1, 2)
    sn = torch.randn(b, t, nh, dh // 2, device=device, dtype=BF16).swapaxes(1, 2)
    ci, si = torch.randn(b, t, h, device=device, dtype=BF16), torch.randn(b, t, h, device=device, dtype=BF16)
    w = torch.rand(h, device=device, dtype=BF16)
    qa, sa = lk.quantize_blockwise(torch.randn(5, 256, device=device))
    qb, sb = lk.quantize_weights_blockwise(torch.randn(256, 256, device=device))
    codes = torch.randint(0, 256, (3, 128), device=device, dtype=torch.uint8) & 0x9F
    mod = torch.randn(b, 1, h, device=device, dtype=BF16) * 0.1
    return {
        "rms_norm_rope": (OPS.rms_norm_rope, (x, ci, si, w, False, 1e-6, backend)),
        "rms_norm_split_rope": (OPS.rms_norm_split_rope, (x, cs, sn, w, True, 1e-6, backend)),
        "fp6_pack": (OPS.fp6_pack, (codes, backend)),
        "fp6_unpack": (OPS.fp6_unpack, (lk.fp6_pack(codes), 128, backend)),
        "quantize_blockwise": (OPS.quantize_blockwise, (x, 448.0, True, backend)),
        "quantize_weights_blockwise": (OPS.quantize_weights_blockwise,
                                       (torch.randn(256, 384, device=device), 448.0, backend)),
        "dequantize_blockwise": (OPS.dequantize_blockwise, (qa, sa, BF16, backend)),
        "quantize_adanorm": (OPS.quantize_adanorm, (x, mod, -mod, 1e-6, 448.0, backend)),
        "quantize_rms_fma_": (OPS.quantize_rms_fma_, (x.clone(), torch.randn_like(x), mod, 1e-6, 448.0, backend)),
        "gated_attention": (OPS.gated_attention,
                            (x, torch.randn(b, t, nh, device=device, dtype=BF16), True, 448.0, backend)),
        "fp8_gemm_nt": (OPS.fp8_gemm_nt, (qa, sa, qb, sb, torch.randn(256, device=device), backend)),
        "fp8_gemm_nt_out": (OPS.fp8_gemm_nt_out,
                            (qa, sa, qb, sb, None, torch.empty(5, 256, device=device, dtype=BF16), backend)),
    }


OP_NAMES = list(_cases("cpu", "torch"))


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", OP_NAMES)
def test_fake_matches_kernel(device, name, backend):
    op, args = _cases(device, backend)[name]
    # opcheck's schema test does arithmetic on the inputs, which torch has no fp8 kernels for
    fp8_in = any(isinstance(a, torch.Tensor) and a.dtype == FP8 for a in args)
    tests = ("test_faketensor", "test_aot_dispatch_dynamic") + (() if fp8_in else ("test_schema",))
    torch.library.opcheck(op.default, args, test_utils=tests)


def _split_rope64(x, cos, sin, w):
    b, t, h = x.shape
    nh = cos.shape[1]
    dh = h // nh
    xd = x.double()
    y = (xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double()).view(b, t, nh, dh)
    c, s = cos.double().transpose(1, 2), sin.double().transpose(1, 2)
    y1, y2 = y[..., : dh // 2], y[..., dh // 2:]
    return torch.cat((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1).view(b, t, h)


def _dequant64(q, s, rows, cols):
    """Each e4m3 code times the scale of its block (s: [rows / rb, cols / 128], rb = 1 or 128)."""
    rb = rows // s.shape[0]
    return q.double() * s.double().repeat_interleave(rb, 0).repeat_interleave(128, 1)


def test_compiled_chain_against_float64(device):
    """norm+rope -> quantize -> GEMM, compiled with fullgraph=True; each stage's output against
    float64 math on its own inputs."""
    b, t, nh, dh, n = 1, 6, 2, 128, 256
    h = nh * dh
    x = torch.randn(b, t, h, device=device, dtype=BF16) * 3
    cos = torch.randn(b, t, nh, dh // 2, device=device, dtype=BF16).swapaxes(1, 2)
    sin = torch.randn(b, t, nh, dh // 2, device=device, dtype=BF16).swapaxes(1, 2)
    w = torch.rand(h, device=device, dtype=BF16)
    qb, sb = lk.quantize_weights_blockwise(torch.randn(n, h, device=device))
    bias = torch.randn(n, device=device)

    def chain(x, cos, sin, w, qb, sb, bias):
        y = lk.rms_norm_split_rope(x, cos, sin, w)
        q, s = lk.quantize_blockwise(y)
        return y, q, s, lk.fp8_gemm_nt(q.view(-1, h), s, qb, sb, bias)

    y, q, s, out = torch.compile(chain, fullgraph=True, backend="aot_eager")(x, cos, sin, w, qb, sb, bias)
    assert_rounded_close(y, _split_rope64(x, cos, sin, w))
    # every code is its element over the block's scale, rounded to e4m3: within half an e4m3 step
    deq = _dequant64(q.view(-1, h), s, t, h)
    y64 = y.double().view(-1, h)
    block_scale = s.double().repeat_interleave(128, 1)
    step = torch.maximum(y64.abs(), 2.0 ** -6 * block_scale) * 2.0 ** -3  # e4m3: 3 mantissa bits
    assert (deq - y64).abs().le(step / 2).all()
    want = deq @ _dequant64(qb, sb, n, h).t() + bias.double()
    assert out.shape == (t, n) and out.dtype == BF16
    if out.is_cuda:
        # On a GPU the GEMM may run on the tensor cores (the SM90 kernel), whose FP8 accumulation
        # within a 128-wide K block is not exact fp32: the bound every GEMM test holds it to.
        assert rel_err(out, want.float()) <= 3e-3
    else:
        assert_rounded_close(out, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans are offered by the CUDA launchers")
def test_compiled_graph_takes_the_eager_plans():
    """The same chain under inductor, three times with fresh inputs: from the second call the ops
    registered with torch.library run the per-signature plans; outputs equal eager's bit for bit
    (eager takes the same plans), and the plans are there."""
    from ltx_kernels import gemm, norm_rope

    b, t, nh, dh, n = 1, 256, 4, 128, 512
    h = nh * dh

    def chain(x, cos, sin, w, qb, sb, bias):
        y = lk.rms_norm_split_rope(x, cos, sin, w)
        q, s = lk.quantize_blockwise(y)
        return y, lk.fp8_gemm_nt(q.view(-1, h), s, qb, sb, bias)

    compiled = torch.compile(chain, fullgraph=True)
    qb, sb = lk.quantize_weights_blockwise(torch.randn(n, h, device="cuda"))
    bias = torch.randn(n, device="cuda")
    for _ in range(3):
        x = torch.randn(b, t, h, device="cuda", dtype=BF16) * 3
        cos = torch.randn(b, t, nh, dh // 2, device="cuda", dtype=BF16).swapaxes(1, 2)
        sin = torch.randn(b, t, nh, dh // 2, device="cuda", dtype=BF16).swapaxes(1, 2)
        w = torch.rand(h, device="cuda", dtype=BF16)
        for got, want in zip(compiled(x, cos, sin, w, qb, sb, bias), chain(x, cos, sin, w, qb, sb, bias)):
            assert torch.equal(got, want)
    gen = norm_rope.tuning.generation
    assert norm_rope._plans.get(_dispatch.signature(("split", x, cos, sin, w, 1e-6, False, "auto", gen)))
    q, s = lk.quantize_blockwise(lk.rms_norm_split_rope(x, cos, sin, w))
    assert gemm._plans.get(_dispatch.signature((q.view(-1, h), s, qb, sb, bias, None, "auto", gen)))
