"""Fused RMSNorm + RoPE, interleaved and split-half, one pass over x.

Each program normalises BLOCK_R rows (tokens) held whole in registers: the
row sum of squares, the weights, the rotation and the store happen before
anything leaves the chip, so x, cos, sin and out cross HBM once each. Math is
fp32 with one rounding at the store (bf16/fp16/fp32, or float8_e4m3fn that the
conversion saturates to +-448 on sm_90).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .. import tuning
from . import cdiv, direct_launcher, next_pow2
from ._rms import FLT_MAX, RESCALE, rms_rows


@triton.jit
def _store_row(out_ptr, offs, o, mask, OUT_FP8: tl.constexpr):
    if OUT_FP8:
        tl.store(out_ptr + offs, o.to(tl.float8e4nv), mask=mask)
    else:
        tl.store(out_ptr + offs, o.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _interleaved_kernel(
    x_ptr, cos_ptr, sin_ptr, w_ptr, out_ptr,
    R, D, stride_x, stride_o,
    c_inner, c_outer_stride, c_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    eps,
    HAS_W: tl.constexpr, OUT_FP8: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    rmask = rows < R
    cmask = cols < D
    mask = rmask[:, None] & cmask[None, :]

    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x, inv = rms_rows(x, D, eps)
    y = x * inv[:, None]
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        y = y * w[None, :]

    c_row = (rows // c_inner) * c_outer_stride + (rows % c_inner) * c_inner_stride
    s_row = (rows // s_inner) * s_outer_stride + (rows % s_inner) * s_inner_stride
    c = tl.load(cos_ptr + c_row[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + s_row[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)

    # rot[2k] = -y[2k+1], rot[2k+1] = y[2k]
    y_even, y_odd = tl.split(tl.reshape(y, (BLOCK_R, BLOCK_D // 2, 2)))
    rot = tl.reshape(tl.join(-y_odd, y_even), (BLOCK_R, BLOCK_D))
    o = y * c + rot * s
    _store_row(out_ptr, rows[:, None] * stride_o + cols[None, :], o, mask, OUT_FP8)


@triton.jit
def _split_kernel(
    x_ptr, cos_ptr, sin_ptr, w_ptr, out_ptr,
    R, T, H, HALF, stride_x, stride_o,
    c_sb, c_sh, c_st, c_sj,
    s_sb, s_sh, s_st, s_sj,
    eps,
    HAS_W: tl.constexpr, OUT_FP8: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr,
):
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    heads = tl.arange(0, BLOCK_H)
    js = tl.arange(0, BLOCK_J)
    bidx = rows // T
    tidx = rows % T
    r3 = rows[:, None, None]
    h3 = heads[None, :, None]
    j3 = js[None, None, :]
    mask = (r3 < R) & (h3 < H) & (j3 < HALF)

    col1 = h3 * (2 * HALF) + j3  # first half of each head; the second is col1 + HALF
    x1 = tl.load(x_ptr + r3 * stride_x + col1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + r3 * stride_x + col1 + HALF, mask=mask, other=0.0).to(tl.float32)
    ss = tl.sum(tl.sum(x1 * x1 + x2 * x2, axis=2), axis=1)
    e = tl.zeros_like(ss) + eps
    if tl.max(ss, axis=0) > FLT_MAX:  # as _rms.rms_rows: rescale rows whose sum of squares overflowed
        big = ss > FLT_MAX
        f = tl.where(big, RESCALE, 1.0)[:, None, None]
        x1 = x1 * f
        x2 = x2 * f
        ss = tl.sum(tl.sum(x1 * x1 + x2 * x2, axis=2), axis=1)
        e = tl.where(big, 0.0, e)
    inv = tl.math.rsqrt(ss / (H * 2 * HALF) + e)
    y1 = x1 * inv[:, None, None]
    y2 = x2 * inv[:, None, None]
    if HAS_W:
        wmask = (h3 < H) & (j3 < HALF)
        y1 = y1 * tl.load(w_ptr + col1, mask=wmask, other=0.0).to(tl.float32)
        y2 = y2 * tl.load(w_ptr + col1 + HALF, mask=wmask, other=0.0).to(tl.float32)

    b3 = bidx[:, None, None]
    t3 = tidx[:, None, None]
    hl = h3.to(tl.int64)  # a head's stride in a materialized [B, H, T, Dh/2] table times H can pass 2^31
    c = tl.load(cos_ptr + b3 * c_sb + hl * c_sh + t3 * c_st + j3 * c_sj, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + b3 * s_sb + hl * s_sh + t3 * s_st + j3 * s_sj, mask=mask, other=0.0).to(tl.float32)
    o1 = y1 * c - y2 * s
    o2 = y2 * c + y1 * s
    _store_row(out_ptr, r3 * stride_o + col1, o1, mask, OUT_FP8)
    _store_row(out_ptr, r3 * stride_o + col1 + HALF, o2, mask, OUT_FP8)


# ---------------------------------------------------------------------------------------------
# Host side: config choice and launch

def _heuristic(row_elems: int) -> dict:
    """About 4K elements per program keeps enough bytes in flight without spilling."""
    block_r = max(1, min(16, 4096 // row_elems))
    elems = block_r * row_elems
    num_warps = 4 if elems <= 2048 else 8 if elems <= 8192 else 16
    return {"BLOCK_R": block_r, "num_warps": num_warps}


def _candidates(row_elems: int) -> list[dict]:
    out = []
    for block_r in (1, 2, 4, 8):
        if block_r * row_elems > 32768:
            continue
        for num_warps in (4, 8, 16):
            out.append({"BLOCK_R": block_r, "num_warps": num_warps})
    return out


def _launch_interleaved(x2, cos_map, sin_map, w, out2, eps, out_fp8, cfg):
    """Launches; returns a direct launcher for (x, cos, sin, w or x, out) of the same signature."""
    R, D = x2.shape
    (c, ci, cso, csi), (s, si, sso, ssi) = cos_map, sin_map
    grid = (cdiv(R, cfg["BLOCK_R"]),)
    args = (x2, c, s, w if w is not None else x2, out2, R, D, x2.stride(0), out2.stride(0),
            ci, cso, csi, si, sso, ssi, eps, w is not None, out_fp8, cfg["BLOCK_R"], next_pow2(D))
    return direct_launcher(_interleaved_kernel[grid](*args, num_warps=cfg["num_warps"]), grid, args, 5)


def rms_norm_rope(x2, cos_map, sin_map, w, out2, eps: float, out_fp8: bool):
    """x2/out2 [R, D] with unit inner stride; cos_map/sin_map: (base, inner, outer_stride, inner_stride).
    Returns a direct launcher for the same signature (see ``direct_launcher``), or None."""
    if x2.shape[0] == 0:
        return None
    row = next_pow2(x2.shape[1])
    key = ("interleaved", x2.shape[1], str(x2.dtype), "fp8" if out_fp8 else "same")
    cfg = tuning.choose(
        "rms_norm_rope", key, _heuristic(row), lambda: _candidates(row),
        lambda c: (lambda: _launch_interleaved(x2, cos_map, sin_map, w, out2, eps, out_fp8, c)),
        device=x2.device,
    )
    return _launch_interleaved(x2, cos_map, sin_map, w, out2, eps, out_fp8, cfg)


def _launch_split(x2, T, H, cos, sin, c_strides, s_strides, w, out2, eps, out_fp8, cfg):
    """Launches; returns a direct launcher for (x, cos, sin, w or x, out) of the same signature."""
    R, h = x2.shape
    half = h // H // 2
    grid = (cdiv(R, cfg["BLOCK_R"]),)
    args = (x2, cos, sin, w if w is not None else x2, out2, R, T, H, half, x2.stride(0), out2.stride(0),
            *c_strides, *s_strides, eps, w is not None, out_fp8, cfg["BLOCK_R"], next_pow2(H), next_pow2(half))
    return direct_launcher(_split_kernel[grid](*args, num_warps=cfg["num_warps"]), grid, args, 5)


def rms_norm_split_rope(x2, T, H, cos, sin, c_strides, s_strides, w, out2, eps: float, out_fp8: bool):
    """x2/out2 [B*T, H*Dh]; cos/sin read at b*sb + h*sh + t*st + j*sj (sb = 0 broadcasts).
    Returns a direct launcher for the same signature (see ``direct_launcher``), or None."""
    if x2.shape[0] == 0:
        return None
    half = x2.shape[1] // H // 2
    row = next_pow2(H) * next_pow2(half) * 2
    key = ("split", H, 2 * half, str(x2.dtype), "fp8" if out_fp8 else "same")
    args = (x2, T, H, cos, sin, c_strides, s_strides, w, out2, eps, out_fp8)
    cfg = tuning.choose(
        "rms_norm_rope", key, _heuristic(row), lambda: _candidates(row),
        lambda c: (lambda: _launch_split(*args, c)), device=x2.device,
    )
    return _launch_split(*args, cfg)
