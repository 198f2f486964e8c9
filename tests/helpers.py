"""Comparison helpers: tolerances are stated in units of the output format's rounding step."""
import torch

import ltx_kernels as lk
from ltx_kernels import reference as ref

FP8 = torch.float8_e4m3fn


def assert_rounded_close(out: torch.Tensor, want32: torch.Tensor, ulps: float = 1.0):
    """out (bf16/fp16/fp32) is want32 (fp32 math) rounded once, within `ulps` of its format's step."""
    assert out.shape == want32.shape, (out.shape, want32.shape)
    o = out.float()
    w = want32.float()
    assert not torch.isnan(o).any() or torch.equal(torch.isnan(o), torch.isnan(w)), "NaN in output"
    mant = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}[out.dtype]
    tiny = torch.finfo(out.dtype).tiny
    fin = torch.isfinite(w)
    # one rounding of the output format, plus fp32 math noise (sum order, rsqrt) relative to the
    # row's scale, which the terms of a RoPE difference share even when the result is near zero
    scale = w[fin].pow(2).mean().sqrt() if fin.any() else torch.tensor(0.0)
    tol = ulps * torch.maximum(w.abs(), torch.full_like(w, tiny)) * 2.0 ** (1 - mant) + 2.0 ** -16 * (w.abs() + scale)
    err = (o - w).abs()
    bad = fin & (err > tol)
    assert not bad.any(), f"{int(bad.sum())} elements off by more than {ulps} ulp; worst {err[fin].max().item()}"


def fp8_value(v: torch.Tensor) -> torch.Tensor:
    return v.float().clamp(-448, 448)


def assert_fp8_close(out: torch.Tensor, want32: torch.Tensor, steps: float = 1.0):
    """out fp8 is want32 rounded to e4m3 (saturated), within `steps` e4m3 spacings."""
    assert out.dtype == FP8
    o = out.float()
    w = fp8_value(want32)
    assert torch.equal(torch.isnan(o), torch.isnan(w)), "NaN pattern differs"
    fin = ~torch.isnan(w)
    spacing = torch.clamp(w.abs(), min=2.0 ** -6) * 2.0 ** -3  # e4m3: 3 mantissa bits, subnormals below 2^-6
    bad = fin & ((o - w).abs() > steps * spacing)
    assert not bad.any(), f"{int(bad.sum())} fp8 values off by more than {steps} step(s)"


def assert_codes_equal(q: torch.Tensor, qr: torch.Tensor):
    assert q.shape == qr.shape and q.dtype == qr.dtype == FP8
    diff = q.view(torch.uint8) != qr.view(torch.uint8)
    assert not diff.any(), f"{int(diff.sum())} of {q.numel()} fp8 codes differ"


# Blockwise FP8 GEMM operands and the dequantized-operand oracle, shared by the Triton and SM90 GEMM tests

def gemm_operands(m, n, k, device, zero_blocks=False):
    a = torch.randn(m, k, device=device) * torch.rand(m, 1, device=device) * 10
    b = torch.randn(n, k, device=device) * torch.rand(n, 1, device=device)
    if zero_blocks:
        a[:, :128] = 0
        b[:128, 128:256 if k > 128 else 128] = 0
    qa, sa = lk.quantize_blockwise(a, backend="torch")
    qb, sb = lk.quantize_weights_blockwise(b, backend="torch")
    return qa, sa, qb, sb


def rel_err(d, want):
    return float((d.float() - want).norm() / want.norm().clamp_min(1e-30))


def gemm_reference(qa, sa, qb, sb, bias):
    """fp32 product of the dequantized operands (each code times its block's scale), plus the bias."""
    m, k = qa.shape
    a = qa.float() * ref.expand_scales(sa, m, k)
    b = qb.float() * ref.expand_scales(sb, qb.shape[0], k)
    return a @ b.t() + (bias if bias is not None else 0)


def run_local_checked(ranks, streams, op, xs, **kwargs):
    """All2All.run_local, then every rank's check(): a kernel that timed out raises All2AllTimeout
    here instead of showing up later as wrong data."""
    outs = lk.All2All.run_local(ranks, streams, op, xs, **kwargs)
    for a in ranks:
        a.check()
    return outs
