"""Independent float64 oracles of the public ops, and the comparisons the property tests use.

Written from the ops' definitions (README, docstrings), not from ``ltx_kernels.reference``: that
module is the ``torch`` backend, one of the things these oracles check. Every oracle takes and
returns tensors on the CPU in float64 (or uint8 for bytes). Where an op's contract is bit-exact
(FP6 bytes, 1x128 / 128x128 codes and scales of a plain quantization), the oracle emulates the
documented fp32 steps exactly; elsewhere it is exact math and the comparison allows one rounding
of the output format plus the fp32 evaluation noise of the kernels (``Noisy``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

F64 = torch.float64
FP8 = torch.float8_e4m3fn
# fp32 rounds |v| >= 2^128 - 2^103 (its largest value plus half a spacing) to infinity
F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103
E4M3_MAX = 448.0
# Lower bound of a block's absmax before its scale is formed (the documented contract: an all-zero
# block gets zero codes and the finite scale 2^-96 / scale_max, never 0 * inf = NaN).
AMAX_FLOOR = 2.0 ** -96

# (stored mantissa bits, smallest exponent of a normal number, largest finite value)
_FORMATS = {
    torch.float32: (23, -126, torch.finfo(torch.float32).max),
    torch.bfloat16: (7, -126, torch.finfo(torch.bfloat16).max),
    torch.float16: (10, -14, torch.finfo(torch.float16).max),
    FP8: (3, -6, E4M3_MAX),
}


def f64(t: torch.Tensor) -> torch.Tensor:
    """The exact values of t (any float dtype, fp8 included) as float64 on the CPU."""
    return t.detach().cpu().to(F64) if t.dtype != FP8 else t.detach().cpu().float().to(F64)


def fp32(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values to fp32 (round to nearest even), kept as float64."""
    return v.to(torch.float32).to(F64)


def spacing(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The distance between neighbouring values of ``dtype`` around |v| (float64). For fp32 and
    bf16 the floor is the smallest normal number, so a GPU flushing fp32 subnormals to zero
    stays within one spacing; fp16 and e4m3 subnormals come from the final conversion itself."""
    mant, emin, _ = _FORMATS[dtype]
    a = v.abs().nan_to_num(0.0, posinf=0.0)
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    e = torch.clamp(e.to(F64) - 1, min=emin)
    if dtype in (torch.float32, torch.bfloat16):
        return torch.maximum(torch.exp2(e - mant), torch.full_like(e, 2.0 ** emin))
    return torch.exp2(e - mant)


def round_e4m3(v: torch.Tensor) -> torch.Tensor:
    """float64 -> the nearest e4m3fn value, ties to even, saturating to +-448, NaN kept (what
    sm_90's cvt.rn.satfinite does), as float64."""
    a = v.abs().clamp(max=E4M3_MAX)
    step = spacing(a, FP8)
    r = (torch.round(a / step) * step).clamp(max=E4M3_MAX)  # torch.round: half to even
    return torch.where(v.isnan(), v, torch.copysign(r, v))


# ---------------------------------------------------------------------------------------------
# Comparisons

@dataclass
class Noisy:
    """An exact value and the magnitude its fp32 evaluation may be off by (absolute); ``loose``
    marks values that depend on the evaluation order (any result is accepted there)."""
    value: torch.Tensor
    noise: torch.Tensor
    loose: torch.Tensor | None = None


def assert_rounded(out: torch.Tensor, want: Noisy, what: str = "output"):
    """out (any float dtype, fp8 saturating) is want.value rounded once to out's format: within one
    spacing of that format at |value| (round to nearest is half a spacing; the other half covers
    a value whose fp32 noise crosses a rounding boundary) plus the fp32 noise. NaN exactly where
    the oracle has NaN; values past the format's range must be the signed infinity (or its largest
    finite value, where rounding lands there)."""
    assert out.shape == want.value.shape, f"{what}: shape {tuple(out.shape)} != {tuple(want.value.shape)}"
    o = f64(out)
    w = want.value.detach().cpu().to(F64)
    noise = want.noise.detach().cpu().to(F64).expand_as(w).nan_to_num(0.0, posinf=math.inf)
    if out.dtype == FP8:
        w = w.clamp(-E4M3_MAX, E4M3_MAX)
    loose = torch.zeros_like(w, dtype=torch.bool) if want.loose is None else want.loose.cpu().expand_as(w)
    nan_o, nan_w = o.isnan() & ~loose, w.isnan() & ~loose
    assert torch.equal(nan_o, nan_w), (f"{what}: NaN at {int((nan_o & ~nan_w).sum())} places the oracle has a "
                                       f"number, a number at {int((nan_w & ~nan_o).sum())} where it has NaN; "
                                       f"first {_first(nan_o != nan_w, o, w)}")
    fmax = _FORMATS[out.dtype][2]
    tol = spacing(w, out.dtype) + noise
    over = w.abs() + tol > fmax
    ok = ((o - w).abs() <= tol) | (w.isinf() & (o == w))
    ok |= over & ((o == torch.copysign(torch.tensor(math.inf, dtype=F64), w)) | ((o - w).abs() <= tol))
    ok |= nan_w | loose
    bad = ~ok
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {w.numel()} values off by more than one "
                           f"{out.dtype} spacing + fp32 noise; first {_first(bad, o, w, tol)}")


def _first(mask, o, w, tol=None):
    idx = tuple(int(i) for i in mask.nonzero()[0])
    s = f"at {idx}: got {o[idx].item()!r}, oracle {w[idx].item()!r}"
    return s + (f", tolerance {tol[idx].item():.3g}" if tol is not None else "")


def assert_same_codes(q: torch.Tensor, want: torch.Tensor, what: str = "codes"):
    """Bit-exact e4m3 codes: the same value and sign (so -0 and +0 differ), any NaN for NaN."""
    assert q.dtype == FP8 and q.shape == want.shape, (what, q.dtype, tuple(q.shape), tuple(want.shape))
    o, w = f64(q), want.detach().cpu().to(F64)
    same = ((o == w) & (torch.signbit(o) == torch.signbit(w))) | (o.isnan() & w.isnan())
    assert same.all(), f"{what}: {int((~same).sum())} of {w.numel()} differ; first {_first(~same, o, w)}"


def assert_equal_values(t: torch.Tensor, want: torch.Tensor, what: str):
    o, w = f64(t), want.detach().cpu().to(F64)
    same = (o == w) | (o.isnan() & w.isnan())
    assert o.shape == w.shape and same.all(), f"{what}: {int((~same).sum())} differ; first {_first(~same, o, w)}"


# ---------------------------------------------------------------------------------------------
# RMSNorm + RoPE

def _rms_normalised(x: torch.Tensor, weights, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x / sqrt(mean(x^2) + eps) * weights in float64 (exact enough: x^2 of any fp32 fits)."""
    x = f64(x)
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if weights is not None:
        y = y * f64(weights)
    return y


# fp32 evaluation noise of the norm kernels relative to the magnitude of the terms an output sums:
# the row sum (a tree of <= 15 levels for rows <= 32768, 2^-24 each), rsqrt (2 ulp on the GPU),
# and three products, together below 2^-20; 2^-18 leaves a factor of four.
NORM_NOISE = 2.0 ** -18


def rms_norm_rope(x, cos, sin, weights, eps) -> Noisy:
    """Interleaved pairs: o[2k] = y[2k] cos[2k] - y[2k+1] sin[2k], o[2k+1] = y[2k+1] cos[2k+1] + y[2k] sin[2k+1]."""
    y = _rms_normalised(x, weights, eps)
    c, s = f64(cos).expand_as(y), f64(sin).expand_as(y)
    partner = torch.stack((-y[..., 1::2], y[..., 0::2]), dim=-1).flatten(-2)
    out = y * c + partner * s
    mag = (y * c).abs() + (partner * s).abs()
    return Noisy(out, NORM_NOISE * mag.nan_to_num(0.0, posinf=0.0))


def rms_norm_split_rope(x, cos, sin, weights, eps) -> Noisy:
    """x [B, T, H*Dh], cos/sin [B or 1, H, T, Dh/2]: first half j of head h:
    y_j cos_j - y_{j+Dh/2} sin_j; second half: y_{j+Dh/2} cos_j + y_j sin_j."""
    b, t, hd = x.shape
    nh = cos.shape[1]
    dh = hd // nh
    y = _rms_normalised(x, weights, eps).view(b, t, nh, dh)
    c = f64(cos).transpose(1, 2).expand(b, t, nh, dh // 2)
    s = f64(sin).transpose(1, 2).expand(b, t, nh, dh // 2)
    y1, y2 = y[..., : dh // 2], y[..., dh // 2:]
    out = torch.cat((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1).reshape(b, t, hd)
    mag = torch.cat(((y1 * c).abs() + (y2 * s).abs(), (y2 * c).abs() + (y1 * s).abs()), dim=-1).reshape(b, t, hd)
    return Noisy(out, NORM_NOISE * mag.nan_to_num(0.0, posinf=0.0))


# ---------------------------------------------------------------------------------------------
# FP6: bits 7 and 4..0 of each e4m3 byte form a 6-bit code; the codes are one MSB-first bit stream

def fp6_pack(x: torch.Tensor) -> torch.Tensor:
    b = x.detach().cpu().contiguous().view(torch.uint8).numpy()
    n = b.shape[-1]
    codes = ((b >> 7) << 5) | (b & 0x1F)
    bits = np.unpackbits(codes[..., None], axis=-1)[..., 2:]  # the 6 low bits, MSB first
    stream = bits.reshape(*b.shape[:-1], n * 6)
    return torch.from_numpy(np.packbits(stream, axis=-1).reshape(*b.shape[:-1], n * 6 // 8).copy())


def fp6_unpack(p: torch.Tensor, n: int) -> torch.Tensor:
    a = p.detach().cpu().contiguous().numpy()
    bits = np.unpackbits(a, axis=-1).reshape(*a.shape[:-1], n, 6)
    codes = np.packbits(np.concatenate([np.zeros_like(bits[..., :2]), bits], axis=-1), axis=-1)[..., 0]
    return torch.from_numpy((((codes >> 5) << 7) | (codes & 0x1F)).astype(np.uint8).copy())


# ---------------------------------------------------------------------------------------------
# Blockwise FP8: per block amax (NaN ignored, floored), codes RN_e4m3(x * fp32(scale_max / amax))
# with the product rounded to fp32, stored scale fp32(amax / scale_max). Emulating the fp32 steps
# in float64 is exact: an fp32 quotient rounded from the float64 one is the IEEE fp32 quotient
# (53 >= 2*24 + 2 bits), and a product of two fp32 values is exact in float64.

def _amax(u: torch.Tensor, dims) -> torch.Tensor:
    a = torch.where(u.isnan(), torch.zeros_like(u), u.abs())
    return a.amax(dim=dims).clamp_min(AMAX_FLOOR)


def _codes(u, amax_b, scale_max):
    smax = fp32(torch.tensor(float(scale_max), dtype=F64))
    inv = fp32(smax / amax_b)
    return round_e4m3(fp32(u * inv)), fp32(amax_b / smax)


def quantize_rows(u: torch.Tensor, scale_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """u float64 [..., K] holding fp32 values -> (codes [..., K], scales [M, K/128]) as float64."""
    k = u.shape[-1]
    u2 = u.reshape(-1, k // 128, 128)
    q, s = _codes(u2, _amax(u2, -1)[..., None], scale_max)
    return q.reshape(u.shape), s[..., 0]


def quantize_blockwise(x: torch.Tensor, scale_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_rows(f64(x), scale_max)


def quantize_weights_blockwise(w: torch.Tensor, scale_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = w.shape
    blocks = f64(w).view(n // 128, 128, k // 128, 128)
    q, s = _codes(blocks, _amax(blocks, (1, 3))[:, None, :, None], scale_max)
    return q.view(n, k), s[:, 0, :, 0]


def gelu_tanh(u: torch.Tensor) -> torch.Tensor:
    """0.5 u (1 + tanh(z)), z = sqrt(2/pi) (u + 0.044715 u^3), as u / (1 + exp(-2z)) (the same
    function: 0.5 (1 + tanh z) = 1 / (1 + exp(-2z))), which keeps the negative tail that 1 + tanh(z)
    cancels away even in float64 past u = -10."""
    z = math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)
    return u / (1.0 + torch.exp(-2.0 * z))


# The kernels evaluate tanh-GELU in fp32 as u / (1 + exp(-2z)). Its error is relative: a few
# roundings, and exp's (ex2.approx 2^-22, plus about |2z| 2^-23 from rounding z and the
# argument), which is largest where |GELU(u)| is small against |u| (the negative tail, where
# GELU(u) ~ u exp(2z)) or bounded by 0.4 |u| 2^-23 (positive z). 2^-21 (|u| + 1) covers it.
GELU_NOISE = 2.0 ** -21


def dequantize(q: torch.Tensor, scales: torch.Tensor, out_dtype) -> torch.Tensor:
    """Element (m, k) times its block's scale (scales [M, KB] or [ceil(M/128), KB]), the product
    rounded to fp32 and then to out_dtype, as the definition's fp32 math does."""
    k = q.shape[-1]
    m = q.shape[:-1].numel()
    v = f64(q).reshape(m, k)
    s = f64(scales)
    rows = torch.arange(m) // (1 if s.shape[0] == m else 128)
    cols = torch.arange(k) // 128
    prod = fp32(v * s[rows][:, cols]) if m and k else v
    return prod.to(out_dtype).to(F64).reshape(q.shape)


# ---------------------------------------------------------------------------------------------
# Fused producers: the quantized value u in float64 with its fp32 noise

def adanorm_u(x, scale, shift, eps) -> Noisy:
    """u = rms_norm(x) * (1 + scale) + shift."""
    y = _rms_normalised(x, None, eps)
    # The kernels form y in fp32 before they multiply: a y below half its smallest subnormal (a row
    # whose other values are 2^150 times larger) is 0 there, so an infinite (1 + scale) gives NaN,
    # not inf. The same here.
    y = torch.where(y.abs() <= 2.0 ** -150, y * 0.0, y)
    a = y * (1.0 + f64(scale))
    sh = f64(shift).expand_as(a)
    u = a + sh
    return Noisy(u, NORM_NOISE * (a.abs() + sh.abs()).nan_to_num(0.0, posinf=0.0))


def rms_fma_residual(x, y, gate) -> Noisy:
    """r = x + y * gate, before its rounding to x's dtype (an fp32 product and sum, or one FMA).
    Where y * gate itself overflows fp32, a two-step evaluation (the interpreter, torch) gives an
    infinity (or NaN, next to an infinite x) and an FMA (the GPU) the exact sum: either is
    accepted there."""
    yg = f64(y) * f64(gate)
    r = f64(x) + yg
    return Noisy(r, 2.0 ** -23 * yg.abs().nan_to_num(0.0, posinf=0.0), loose=yg.abs() >= F32_OVERFLOW)


def rms_normalised(r, eps) -> Noisy:
    y = _rms_normalised(r, None, eps)
    return Noisy(y, NORM_NOISE * y.abs().nan_to_num(0.0, posinf=0.0))


def gated_u(x, logits) -> Noisy:
    """out[..., h*D + j] = x[..., h*D + j] * 2 * sigmoid(logit[..., h])."""
    nh = logits.shape[-1]
    xv = f64(x)
    lg = f64(logits)
    # The gate is evaluated in fp32, where exp(-l) overflows for l < -88.7 and the gate becomes 0
    # (its true value is below 1e-38): the same here, so that an infinite x gets NaN, not inf.
    e = torch.exp(-lg)
    g = torch.where(e >= F32_OVERFLOW, 0.0, 2.0 / (1.0 + e))
    u = (xv.unflatten(-1, (nh, xv.shape[-1] // nh)) * g[..., None]).flatten(-2)
    # exp in fp32: the argument's own rounding (|l| 2^-24, relative, in the result) and ex2's
    # 2^-22; a saturated gate (|l| > ~100) is exactly 0 or 2 in both.
    rel = 2.0 ** -20 + lg.abs().clamp(max=100.0) * 2.0 ** -22
    rel = rel.unsqueeze(-1).expand(*lg.shape, xv.shape[-1] // nh).flatten(-2)
    return Noisy(u, rel * u.abs().nan_to_num(0.0, posinf=0.0))


def assert_quantized(q: torch.Tensor, scales: torch.Tensor, u: Noisy, scale_max: float, what: str):
    """Codes and 1x128 scales of a value known up to fp32 noise. Each scale is the block's absmax
    over scale_max (within the noise, and one fp32 rounding; past fp32's range, inf); each code is
    u * scale_max / absmax rounded to e4m3: one e4m3 spacing (see ``assert_rounded``) plus the
    element's own noise and the absmax's, both in code units."""
    k = q.shape[-1]
    m = q.shape[:-1].numel()
    uv = u.value.reshape(m, k // 128, 128)
    noise = u.noise.expand_as(u.value).reshape(m, k // 128, 128).nan_to_num(0.0, posinf=math.inf)
    inf = torch.tensor(math.inf, dtype=F64)
    # the op computes u in fp32: a value past fp32's range is an infinity there (amax and scale
    # inf, the block's codes 0 and NaN), whatever its exact value
    f32max = torch.finfo(torch.float32).max
    uv = torch.where(uv.abs() >= F32_OVERFLOW, torch.copysign(inf, uv), uv)
    smax = fp32(torch.tensor(float(scale_max), dtype=F64))
    s = f64(scales)
    assert s.shape == (m, k // 128), f"{what}: scales shape {tuple(s.shape)}"
    amax = _amax(uv, -1)
    nb = noise.amax(-1)
    want_s = amax / smax
    tol_s = nb / smax + 2.0 ** -22 * want_s
    ok = ((s - want_s).abs() <= tol_s) | (s == want_s) | ((want_s + tol_s > f32max) & (s == inf))
    assert ok.all(), f"{what} scales: {int((~ok).sum())} off; first {_first(~ok, s, want_s, tol_s)}"
    per = (smax / amax)[..., None]
    codes = uv * per
    code_noise = (noise + uv.abs() * nb[..., None] / amax[..., None]) * per
    assert_rounded(q.reshape(m, k // 128, 128), Noisy(codes, code_noise.nan_to_num(0.0, posinf=0.0)),
                   f"{what} codes")


# ---------------------------------------------------------------------------------------------
# Blockwise FP8 GEMM: D = sum_kb sa[m, kb] sb[n/128, kb] (A_kb . B_kb) + bias, bf16 out

def fp8_gemm_nt(a, sa, b, sb, bias) -> tuple[torch.Tensor, torch.Tensor]:
    """(D, magnitude): D exact in float64 (a 128-long dot of e4m3 products needs < 53 bits), and
    the same sum over absolute values, which bounds how far an fp32 evaluation can be off."""
    m, k = a.shape
    n = b.shape[0]
    av, bv = f64(a), f64(b)
    sav, sbv = f64(sa), f64(sb)
    d = torch.zeros(m, n, dtype=F64)
    mag = torch.zeros(m, n, dtype=F64)
    for kb in range(k // 128):
        blk = slice(kb * 128, (kb + 1) * 128)
        w = sav[:, kb, None] * sbv[torch.arange(n) // 128, kb][None, :]
        d += w * (av[:, blk] @ bv[:, blk].t())
        mag += w.abs() * (av[:, blk].abs() @ bv[:, blk].abs().t())
    if bias is not None:
        d += f64(bias)
        mag += f64(bias).abs()
    return d, mag


# ---------------------------------------------------------------------------------------------
# All2All layouts, token by token

def send_recv_heads(xs: list) -> list:
    """xs[r] [B, c_r, H, D] -> out[t] [B, T, H/W, D]: every token in rank order, heads of rank t."""
    w = len(xs)
    hpr = xs[0].shape[2] // w
    outs = []
    for t in range(w):
        tokens = [x[:, i, t * hpr:(t + 1) * hpr] for x in xs for i in range(x.shape[1])]
        outs.append(torch.stack(tokens, 1) if tokens else xs[0].new_empty(xs[0].shape[0], 0, hpr, xs[0].shape[3]))
    return outs


def gather_heads(ys: list, counts: list) -> list:
    """ys[r] [B, T, H/W, D] (rank r's heads of all tokens) -> out[t] [B, c_t, H, D]."""
    outs, start = [], 0
    for c in counts:
        outs.append(torch.cat([y[:, start:start + c] for y in ys], dim=2))
        start += c
    return outs


def allgather(xs: list) -> list:
    full = torch.cat(xs, dim=1)
    return [full for _ in xs]
