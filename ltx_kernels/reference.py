"""Plain-torch implementations of every op, in fp32 math.

These are the CPU path (backend="torch") and the oracle the tests compare the
kernels with. They take already-validated arguments (the public wrappers check
them) and favour obviousness over speed.
"""
from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
FP8_SCALE_MAX = 448.0
FP6_SCALE_MAX = 0.1172
BLOCK = 128
# Lower bound on a block's absmax when forming its scale. An all-zero (or
# denormal-only) block then gets zero codes and a tiny finite scale instead of
# 0 * inf = NaN, and scale_max / amax stays finite in fp32 for any scale_max below 2^32.
AMAX_FLOOR = 2.0 ** -96


def to_fp8_saturated(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn with RNE, saturating to +-448, NaN kept (what sm_90 cvt.satfinite does)."""
    return v.float().clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _store(v: torch.Tensor, out_fp8: bool, dtype: torch.dtype) -> torch.Tensor:
    return to_fp8_saturated(v) if out_fp8 else v.to(dtype)


# A row whose mean square overflows fp32 (|x| from ~1.8e19, or a long row from ~1e17) is scaled by
# this power of two first (exact) and normalised without eps, which is negligible next to it.
OVERFLOW_RESCALE = 2.0 ** -80


def rms_norm(xf: torch.Tensor, eps: float) -> torch.Tensor:
    ms = xf.pow(2).mean(-1, keepdim=True)
    big = torch.isinf(ms)  # (rows holding an inf stay inf here: 0 for finite values, NaN for inf)
    if bool(big.any()):
        xf = torch.where(big, xf * OVERFLOW_RESCALE, xf)
        ms = xf.pow(2).mean(-1, keepdim=True)
        return xf * torch.rsqrt(ms + torch.where(big, 0.0, eps))
    return xf * torch.rsqrt(ms + eps)


# ---------------------------------------------------------------------------------------------
# RMSNorm + RoPE

def rms_norm_rope(x, cos_freqs, sin_freqs, weights=None, out_fp8=False, eps=1e-6):
    """Interleaved pairs (2k, 2k+1); cos/sin indexed by each element's own position."""
    y = rms_norm(x.float(), eps)
    if weights is not None:
        y = y * weights.float()
    even, odd = y[..., 0::2], y[..., 1::2]
    rot = torch.stack((-odd, even), dim=-1).flatten(-2)
    out = y * cos_freqs.float() + rot * sin_freqs.float()
    return _store(out, out_fp8, x.dtype)


def rms_norm_split_rope(x, cos_freqs, sin_freqs, weights=None, out_fp8=False, eps=1e-6):
    """x [B, T, H*Dh]; cos/sin [B or 1, H, T, Dh/2]; halves of each head rotate together."""
    b, t, h = x.shape
    nh = cos_freqs.shape[1]
    dh = h // nh
    y = rms_norm(x.float(), eps)
    if weights is not None:
        y = y * weights.float()
    y = y.view(b, t, nh, dh).transpose(1, 2)
    y1, y2 = y[..., : dh // 2], y[..., dh // 2:]
    c, s = cos_freqs.float(), sin_freqs.float()
    out = torch.cat((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1)
    out = out.transpose(1, 2).reshape(b, t, h)
    return _store(out, out_fp8, x.dtype)


# ---------------------------------------------------------------------------------------------
# FP6: e4m3 codes with bits 6-5 zero, 4 codes -> 3 bytes MSB-first

def fp6_pack(x: torch.Tensor) -> torch.Tensor:
    b = x.view(torch.uint8).to(torch.int32)
    code = ((b >> 7) << 5) | (b & 0x1F)
    c = code.view(*code.shape[:-1], code.shape[-1] // 4, 4)  # (a -1 is ambiguous for 0 rows)
    v = (c[..., 0] << 18) | (c[..., 1] << 12) | (c[..., 2] << 6) | c[..., 3]
    out = torch.stack(((v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF), dim=-1)
    return out.flatten(-2).to(torch.uint8)


def fp6_unpack(p: torch.Tensor, n: int) -> torch.Tensor:
    g = p.to(torch.int32).view(*p.shape[:-1], p.shape[-1] // 3, 3)
    v = (g[..., 0] << 16) | (g[..., 1] << 8) | g[..., 2]
    codes = torch.stack(((v >> 18) & 63, (v >> 12) & 63, (v >> 6) & 63, v & 63), dim=-1).flatten(-2)
    byte = ((codes >> 5) << 7) | (codes & 0x1F)
    return byte.to(torch.uint8).view(*p.shape[:-1], n)


def fp6_bad_values(x: torch.Tensor) -> torch.Tensor:
    """Mask of values fp6_pack cannot hold (exponent bits 6-5 set: |v| > 0.1171875, or NaN)."""
    return (x.view(torch.uint8) & 0x60) != 0


# ---------------------------------------------------------------------------------------------
# Blockwise FP8 quantization

def align4(m: int) -> int:
    return (m + 3) // 4 * 4


def empty_aligned_scales(m: int, kb: int, device, zero: bool = True) -> torch.Tensor:
    """fp32 logical [M, KB], element (m, kb) at m + kb*A4(M): the layout the GEMMs read.

    The storage covers all KB*A4(M) floats, so the padding rows exist (and are
    zero) instead of being read past the end of the allocation.
    """
    buf = (torch.zeros if zero else torch.empty)(kb, align4(m), dtype=torch.float32, device=device)
    return buf.t()[:m]


def _quantize_blocks(u: torch.Tensor, scale_max: float):
    """u fp32 [..., NB, 128] -> codes fp8 [..., NB, 128], scales fp32 [..., NB]."""
    a = u.abs()
    # NaN is ignored by the absmax (a NaN element's own code is NaN); inf still makes amax inf
    amax = torch.where(a.isnan(), 0.0, a).amax(dim=-1).clamp_min(AMAX_FLOOR)
    sm = torch.tensor(scale_max, dtype=torch.float32, device=u.device)
    inv = sm / amax
    q = to_fp8_saturated(u * inv.unsqueeze(-1))
    return q, amax / sm


def _quantize_rows(u: torch.Tensor, scale_max: float):
    """u fp32 [M, K] -> (q [M, K], aligned scales [M, K/128])."""
    m, k = u.shape
    q, s = _quantize_blocks(u.view(m, k // BLOCK, BLOCK), scale_max)
    scales = empty_aligned_scales(m, k // BLOCK, u.device)
    scales.copy_(s)
    return q.view(m, k), scales


def gelu_tanh(u: torch.Tensor) -> torch.Tensor:
    """tanh-approximate GELU, 0.5 u (1 + tanh(z)) written as u / (1 + exp(-2z)): the same function
    without the cancellation of 1 + tanh(z) near -1, which leaves nothing of GELU's negative tail
    (x < -4.5) in fp32."""
    z = 0.7978845608028654 * (u + 0.044715 * u * u * u)
    return u / (1.0 + torch.exp(-2.0 * z))


def quantize_blockwise(x, scale_max=FP8_SCALE_MAX, gelu=False):
    k = x.shape[-1]
    u = x.reshape(-1, k).float()
    if gelu:
        u = gelu_tanh(u)
    q, s = _quantize_rows(u, scale_max)
    return q.view(x.shape), s


def quantize_weights_blockwise(w, scale_max=FP8_SCALE_MAX):
    n, k = w.shape
    blocks = w.float().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK).transpose(1, 2)
    q, s = _quantize_blocks(blocks.reshape(n // BLOCK, k // BLOCK, BLOCK * BLOCK), scale_max)
    q = q.view(n // BLOCK, k // BLOCK, BLOCK, BLOCK).transpose(1, 2).reshape(n, k).contiguous()
    return q, s.contiguous()  # (row-major whatever w's strides: checkpoints store them as they are)


def expand_scales(scales: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """Per-element fp32 scale [M, K] from either layout: [M, K/128] or [M/128, K/128]."""
    s = scales.float()
    if s.shape[0] != m:
        s = s.repeat_interleave(BLOCK, dim=0)[:m]
    return s.repeat_interleave(BLOCK, dim=1)[:, :k]


def dequantize_blockwise(q, scales, out_dtype=torch.bfloat16):
    k = q.shape[-1]
    q2 = q.reshape(q.shape[:-1].numel(), k)
    out = q2.float() * expand_scales(scales, q2.shape[0], k)
    return out.to(out_dtype).view(q.shape)


def quantize_adanorm(x, scale, shift, eps=1e-6, scale_max=FP8_SCALE_MAX):
    """quantize(rms_norm(x) * (1 + scale) + shift); scale/shift broadcast to x."""
    u = rms_norm(x.float(), eps) * (1.0 + scale.float()) + shift.float()
    k = x.shape[-1]
    q, s = _quantize_rows(u.reshape(-1, k), scale_max)
    return q.view(x.shape), s


def quantize_rms_fma(x, y, gate, eps=1e-6, scale_max=FP8_SCALE_MAX):
    """r = x + y*gate (rounded to x.dtype); returns (quantize(rms_norm(r)), r)."""
    r = (x.float() + y.float() * gate.float()).to(x.dtype)
    k = x.shape[-1]
    q, s = _quantize_rows(rms_norm(r.float(), eps).reshape(-1, k), scale_max)
    return q.view(x.shape), s, r


def gated_attention(x, gate_logits, quantize=True, scale_max=FP8_SCALE_MAX):
    """out[..., h*D + j] = x * 2*sigmoid(logit[..., h]); then blockwise-quantized or stored bf16."""
    nh = gate_logits.shape[-1]
    k = x.shape[-1]
    g = 2.0 * torch.sigmoid(gate_logits.float())
    u = (x.float().unflatten(-1, (nh, k // nh)) * g.unsqueeze(-1)).flatten(-2)
    if not quantize:
        return u.to(x.dtype), None
    q, s = _quantize_rows(u.reshape(-1, k), scale_max)
    return q.view(x.shape), s


# ---------------------------------------------------------------------------------------------
# Blockwise FP8 GEMM: D = (A * sa) @ (B * sb)^T + bias, fp32 math, bf16 out

def fp8_gemm_nt(a, a_scales, b, b_scales, bias=None):
    m, k = a.shape
    n = b.shape[0]
    a_deq = a.float() * expand_scales(a_scales, m, k)
    b_deq = b.float() * expand_scales(b_scales, n, k)
    d = a_deq @ b_deq.t()
    if bias is not None:
        d = d + bias.float()
    return d.to(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# All2All layouts (one list entry per rank)

def send_recv_heads(xs: list) -> list:
    """xs[r]: [B, c_r, H, D] -> out[t]: [B, sum(c), H/W, D] holding heads t*H/W .. (t+1)*H/W."""
    w = len(xs)
    hpr = xs[0].shape[2] // w
    return [torch.cat([x[:, :, t * hpr:(t + 1) * hpr] for x in xs], dim=1).contiguous() for t in range(w)]


def gather_heads(ys: list, counts: list) -> list:
    """Inverse of send_recv_heads: ys[r]: [B, T, H/W, D] -> out[t]: [B, c_t, H, D]."""
    w = len(ys)
    offs = [0] + list(torch.tensor(counts).cumsum(0).tolist())
    return [torch.cat([y[:, offs[t]:offs[t + 1]] for y in ys], dim=2).contiguous() for t in range(w)]


def allgather(xs: list) -> list:
    full = torch.cat(xs, dim=1).contiguous()
    return [full.clone() for _ in xs]


