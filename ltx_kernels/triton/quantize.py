"""Blockwise FP8 quantization family: 1x128 activation blocks, 128x128 weight blocks.

All kernels share ``_quantize_store``: per 128-block absmax (NaN ignored, floored
at AMAX_FLOOR so zero blocks give zero codes and a finite scale), codes
``x * (scale_max / amax)`` cast to e4m3 (saturating on sm_90), stored scale
``amax / scale_max``. Both divisions are IEEE (div_rn), so codes match the
torch reference bit for bit. Activation scales go to the M-major layout with
A4(M) padding rows that the GEMMs read; the padding is written as zeros.
The fused producers hold a whole row in registers (the RMS needs it).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import reference as ref
from .. import tuning
from .._dispatch import interpreter_on
from . import cdiv, direct_launcher, next_pow2
from ._rms import FLT_MAX, RESCALE, rms_rows


# NaN is ignored by the block absmax. The GPU's max does that by itself (maxNum); numpy's, in the
# interpreter, propagates NaN, so only there is it masked out (two instructions per element).
_MASK_NAN = tl.constexpr(interpreter_on())


@triton.jit
def _quantize_store(u, rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                    AMAX_FLOOR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    """u: fp32 [BLOCK_M, BLOCK_KB*128] for rows ``rows`` and the 128-blocks from ``kb0`` on."""
    kbs = kb0 + tl.arange(0, BLOCK_KB)
    u3 = tl.reshape(u, (BLOCK_M, BLOCK_KB, 128))
    a3 = tl.abs(u3)
    if _MASK_NAN:
        a3 = tl.where(u3 == u3, a3, 0.0)
    amax = tl.max(a3, axis=2)
    amax = tl.maximum(amax, AMAX_FLOOR)
    smax = tl.full((BLOCK_M, BLOCK_KB), scale_max, tl.float32)
    inv = tl.math.div_rn(smax, amax)
    q = tl.reshape((u3 * inv[:, :, None]).to(tl.float8e4nv), (BLOCK_M, BLOCK_KB * 128))
    cols = kb0 * 128 + tl.arange(0, BLOCK_KB * 128)
    qmask = (rows[:, None] < M) & (cols[None, :] < KB * 128)
    tl.store(q_ptr + rows[:, None] * stride_q + cols[None, :], q, mask=qmask)
    scale = tl.where(rows[:, None] < M, tl.math.div_rn(amax, smax), 0.0)
    smask = (rows[:, None] < M_PAD) & (kbs[None, :] < KB)
    tl.store(s_ptr + rows[:, None] + kbs[None, :] * s_stride, scale, mask=smask)


@triton.jit
def _gelu_tanh(u):
    # 0.5 u (1 + tanh(z)) as u / (1 + exp(-2z)): no cancellation in the negative tail (reference.gelu_tanh)
    z = 0.7978845608028654 * (u + 0.044715 * u * u * u)
    return u / (1.0 + tl.exp(-2.0 * z))


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, s_ptr, M, M_PAD, KB, stride_x, stride_q, s_stride, scale_max,
                     GELU: tl.constexpr, AMAX_FLOOR: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kb0 = tl.program_id(1) * BLOCK_KB
    cols = kb0 * 128 + tl.arange(0, BLOCK_KB * 128)
    mask = (rows[:, None] < M) & (cols[None, :] < KB * 128)
    u = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if GELU:
        u = _gelu_tanh(u)
    _quantize_store(u, rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                    AMAX_FLOOR, BLOCK_M, BLOCK_KB)


@triton.jit
def _mod_offsets(rows, inner, outer_stride, inner_stride):
    return (rows // inner) * outer_stride + (rows % inner) * inner_stride


@triton.jit
def _modulate(x, inv, sc_ptr, sh_ptr, sc_row, sh_row, cols, mask):
    """The model's adaptive norm: rms_norm(x) * (1 + scale) + shift, with x already fp32 and inv its
    row's 1/rms; scale and shift rows at sc_row / sh_row (broadcast or per token)."""
    sc = tl.load(sc_ptr + sc_row[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    sh = tl.load(sh_ptr + sh_row[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    return x * inv[:, None] * (1.0 + sc) + sh


@triton.jit
def _adanorm_kernel(x_ptr, sc_ptr, sh_ptr, q_ptr, s_ptr, M, M_PAD, KB, stride_x, stride_q, s_stride,
                    sc_inner, sc_outer_stride, sc_inner_stride, sh_inner, sh_outer_stride, sh_inner_stride,
                    eps, scale_max, AMAX_FLOOR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kb0 = 0
    cols = tl.arange(0, BLOCK_KB * 128)
    K = KB * 128
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x, inv = rms_rows(x, K, eps)
    sc_row = _mod_offsets(rows, sc_inner, sc_outer_stride, sc_inner_stride)
    sh_row = _mod_offsets(rows, sh_inner, sh_outer_stride, sh_inner_stride)
    u = _modulate(x, inv, sc_ptr, sh_ptr, sc_row, sh_row, cols, mask)
    _quantize_store(u, rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                    AMAX_FLOOR, BLOCK_M, BLOCK_KB)


@triton.jit
def _adanorm_twopass_kernel(x_ptr, sc_ptr, sh_ptr, q_ptr, s_ptr, M, M_PAD, KB, stride_x, stride_q, s_stride,
                            sc_inner, sc_outer_stride, sc_inner_stride, sh_inner, sh_outer_stride, sh_inner_stride,
                            eps, scale_max, AMAX_FLOOR: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK_KB: tl.constexpr):
    """Rows in column chunks: pass 1 sums x^2, pass 2 re-reads x (from L2) with the modulation and
    quantizes chunk by chunk. Fewer live registers than whole rows, so more rows in flight."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    K = KB * 128
    rmask = rows < M
    ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for kb0 in range(0, KB, CHUNK_KB):
        cols = kb0 * 128 + tl.arange(0, CHUNK_KB * 128)
        mask = rmask[:, None] & (cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=1)
    e = tl.zeros_like(ss) + eps
    f = tl.full((BLOCK_M,), 1.0, tl.float32)
    over = tl.max(ss, axis=0) > FLT_MAX
    if over:  # as _rms.rms_rows: rows whose sum of squares overflowed are summed again, rescaled
        f = tl.where(ss > FLT_MAX, RESCALE, 1.0)
        e = tl.where(ss > FLT_MAX, 0.0, e)
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for kb0 in range(0, KB, CHUNK_KB):
            cols = kb0 * 128 + tl.arange(0, CHUNK_KB * 128)
            mask = rmask[:, None] & (cols[None, :] < K)
            x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            x = x * f[:, None]
            ss += tl.sum(x * x, axis=1)
    inv = tl.math.rsqrt(ss / K + e)
    sc_row = _mod_offsets(rows, sc_inner, sc_outer_stride, sc_inner_stride)
    sh_row = _mod_offsets(rows, sh_inner, sh_outer_stride, sh_inner_stride)
    for kb0 in range(0, KB, CHUNK_KB):
        cols = kb0 * 128 + tl.arange(0, CHUNK_KB * 128)
        mask = rmask[:, None] & (cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if over:
            x = x * f[:, None]
        u = _modulate(x, inv, sc_ptr, sh_ptr, sc_row, sh_row, cols, mask)
        _quantize_store(u, rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                        AMAX_FLOOR, BLOCK_M, CHUNK_KB)


@triton.jit
def _adanorm_bcast_kernel(x_ptr, sc_ptr, sh_ptr, q_ptr, s_ptr, M, M_PAD, KB, B, T, stride_x, stride_q, s_stride,
                          sc_bstride, sh_bstride, eps, scale_max, AMAX_FLOOR: tl.constexpr,
                          ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    """Modulation shared by the T tokens of a sample ([B, 1, h]): program (i, b) reads its scale and
    shift once and runs ROWS tokens of sample b, BLOCK_M rows at a time."""
    b = tl.program_id(1)
    t0 = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK_KB * 128)
    K = KB * 128
    cmask = cols < K
    sc = 1.0 + tl.load(sc_ptr + b.to(tl.int64) * sc_bstride + cols, mask=cmask, other=0.0).to(tl.float32)
    sh = tl.load(sh_ptr + b.to(tl.int64) * sh_bstride + cols, mask=cmask, other=0.0).to(tl.float32)
    for i in tl.range(0, ROWS // BLOCK_M):
        t = t0 + i * BLOCK_M + tl.arange(0, BLOCK_M)
        rows = b.to(tl.int64) * T + t
        # tokens past T belong to the next sample; only the last sample runs on into the padding rows
        rows = tl.where((t < T) | (b == B - 1), rows, M_PAD)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=(rows[:, None] < M) & cmask[None, :],
                    other=0.0).to(tl.float32)
        x, inv = rms_rows(x, K, eps)
        u = x * inv[:, None] * sc[None, :] + sh[None, :]
        _quantize_store(u, rows, M, M_PAD, 0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                        AMAX_FLOOR, BLOCK_M, BLOCK_KB)


@triton.jit
def _rms_fma_kernel(x_ptr, y_ptr, g_ptr, q_ptr, s_ptr, M, M_PAD, KB, stride_x, stride_y, stride_q, s_stride,
                    g_inner, g_outer_stride, g_inner_stride, eps, scale_max,
                    AMAX_FLOOR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kb0 = 0
    cols = tl.arange(0, BLOCK_KB * 128)
    K = KB * 128
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    x_ptrs = x_ptr + rows[:, None] * stride_x + cols[None, :]
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + rows[:, None] * stride_y + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    g_row = _mod_offsets(rows, g_inner, g_outer_stride, g_inner_stride)
    g = tl.load(g_ptr + g_row[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = (x + y * g).to(x_ptr.dtype.element_ty)
    tl.store(x_ptrs, r, mask=mask)
    r = r.to(tl.float32)  # normalise the residual as stored, like the model does
    r, inv = rms_rows(r, K, eps)
    _quantize_store(r * inv[:, None], rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                    AMAX_FLOOR, BLOCK_M, BLOCK_KB)


@triton.jit
def _gated_kernel(x_ptr, l_ptr, q_ptr, s_ptr, M, M_PAD, KB, NH, stride_x, stride_l, stride_q, s_stride,
                  scale_max, HD: tl.constexpr, QUANTIZE: tl.constexpr, AMAX_FLOOR: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kb0 = tl.program_id(1) * BLOCK_KB
    cols = kb0 * 128 + tl.arange(0, BLOCK_KB * 128)
    K = NH * HD
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if (BLOCK_KB * 128) % HD == 0:
        # one logit per head of the tile, broadcast over its HD columns (no per-element gather)
        HEADS: tl.constexpr = BLOCK_KB * 128 // HD
        heads = kb0 * 128 // HD + tl.arange(0, HEADS)
        logit = tl.load(l_ptr + rows[:, None] * stride_l + heads[None, :],
                        mask=(rows[:, None] < M) & (heads[None, :] < NH), other=0.0).to(tl.float32)
        gate = 2.0 / (1.0 + tl.exp(-logit))
        u = tl.reshape(tl.reshape(x, (BLOCK_M, HEADS, HD)) * gate[:, :, None], (BLOCK_M, BLOCK_KB * 128))
    else:
        logit = tl.load(l_ptr + rows[:, None] * stride_l + cols[None, :] // HD, mask=mask, other=0.0).to(tl.float32)
        u = x * (2.0 / (1.0 + tl.exp(-logit)))
    if QUANTIZE:
        _quantize_store(u, rows, M, M_PAD, kb0, KB, q_ptr, stride_q, s_ptr, s_stride, scale_max,
                        AMAX_FLOOR, BLOCK_M, BLOCK_KB)
    else:
        tl.store(q_ptr + rows[:, None] * stride_q + cols[None, :], u.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _quantize_weights_kernel(w_ptr, q_ptr, s_ptr, stride_w, stride_q, KB, scale_max, AMAX_FLOOR: tl.constexpr):
    nb = tl.program_id(0)
    kb = tl.program_id(1)
    r = (nb * 128 + tl.arange(0, 128)).to(tl.int64)
    c = kb * 128 + tl.arange(0, 128)
    w = tl.load(w_ptr + r[:, None] * stride_w + c[None, :]).to(tl.float32)
    amax = tl.maximum(tl.max(tl.max(tl.where(w == w, tl.abs(w), 0.0), axis=1), axis=0), AMAX_FLOOR)
    smax = tl.full((), scale_max, tl.float32)
    q = (w * tl.math.div_rn(smax, amax)).to(tl.float8e4nv)
    tl.store(q_ptr + r[:, None] * stride_q + c[None, :], q)
    tl.store(s_ptr + nb * KB + kb, tl.math.div_rn(amax, smax))


@triton.jit
def _dequantize_kernel(q_ptr, s_ptr, o_ptr, M, K, stride_q, stride_o, s_sm, s_sk,
                       ROWS_PER_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_KB: tl.constexpr):
    # A tile of BLOCK_M rows x BLOCK_KB whole 128-blocks: one scale per (row, block), broadcast
    # over its 128 codes (a scale gathered per element costs as much traffic as the codes).
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    kbs = tl.program_id(1) * BLOCK_KB + tl.arange(0, BLOCK_KB)
    cols = kbs[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = (rows[:, None, None] < M) & (cols[None, :, :] < K)
    q = tl.load(q_ptr + rows[:, None, None] * stride_q + cols[None, :, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + (rows[:, None] // ROWS_PER_SCALE) * s_sm + kbs[None, :] * s_sk,
                mask=(rows[:, None] < M) & (kbs[None, :] * 128 < K), other=0.0)
    tl.store(o_ptr + rows[:, None, None] * stride_o + cols[None, :, :], (q * s[:, :, None]).to(o_ptr.dtype.element_ty),
             mask=mask)


# ---------------------------------------------------------------------------------------------
# Host side

def _row_cfg(kb_pad: int) -> dict:
    """Whole-row kernels: about 8K elements per program."""
    block_m = max(1, min(8, 64 // kb_pad))
    elems = block_m * kb_pad * 128
    return {"BLOCK_M": block_m, "num_warps": 4 if elems <= 2048 else 8 if elems <= 8192 else 16}


def _row_candidates(kb_pad: int) -> list[dict]:
    # 2 warps: the per-row reductions and divisions spread over fewer threads (issue-bound rows)
    return [{"BLOCK_M": m, "num_warps": w} for m in (1, 2, 4, 8) for w in (2, 4, 8, 16)
            if m * kb_pad * 128 <= 32768 and m * kb_pad * 128 <= 64 * 32 * w]


def _chunk_cfg(kb: int) -> dict:
    block_kb = min(next_pow2(kb), 8)
    return {"BLOCK_M": max(1, 32 // block_kb), "BLOCK_KB": block_kb, "num_warps": 8}


def _chunk_candidates(kb: int) -> list[dict]:
    out = []
    for bkb in (1, 2, 4, 8, 16, 32):
        if bkb > next_pow2(kb):
            continue
        for bm in (1, 2, 4, 8, 16, 32):
            if 2048 <= bm * bkb * 128 <= 32768:
                for w in (4, 8, 16):
                    out.append({"BLOCK_M": bm, "BLOCK_KB": bkb, "num_warps": w})
    return out


def scale_buffer(m: int, kb: int, device) -> torch.Tensor:
    """[KB, A4(M)] fp32; the kernels fill every element (padding rows with 0)."""
    return torch.empty(kb, ref.align4(m), dtype=torch.float32, device=device)


def quantize(x2, q2, sbuf, scale_max: float, gelu: bool, cfg: dict | None = None):
    """Returns a direct launcher for (x2, q2, sbuf) of the same signature (see ``direct_launcher``),
    or None."""
    m, k = x2.shape
    kb = k // 128
    if m == 0:
        return None

    def launch(c):
        grid = (cdiv(sbuf.shape[1], c["BLOCK_M"]), cdiv(kb, c["BLOCK_KB"]))
        args = (x2, q2, sbuf, m, sbuf.shape[1], kb, x2.stride(0), q2.stride(0), sbuf.stride(0), scale_max,
                gelu, ref.AMAX_FLOOR, c["BLOCK_M"], c["BLOCK_KB"])
        return direct_launcher(_quantize_kernel[grid](*args, num_warps=c["num_warps"]), grid, args, 3)

    if cfg is not None:  # given (warmup, tests): no lookup
        return launch(cfg)
    key = ("plain", k, str(x2.dtype), gelu)
    cfg = tuning.choose("quantize", key, _chunk_cfg(kb), lambda: _chunk_candidates(kb),
                        lambda c: (lambda: launch(c)), device=x2.device)
    return launch(cfg)


# CUDA's limit on a grid's y dimension: the shared-modulation kernel runs one program row per sample
MAX_GRID_Y = 65535


def shared_modulation(m: int, sc_map, sh_map) -> bool:
    """Whether scale and shift are shared by each sample's tokens (zero token stride, the same
    tokens per sample for both, whole samples), with few enough samples for one grid row each:
    then the shared-modulation kernel can read them once for many rows."""
    (_, sci, _, scs), (_, shi, _, shs) = sc_map, sh_map
    return scs == 0 and shs == 0 and sci == shi and m % sci == 0 and m // sci <= MAX_GRID_Y


def quantize_adanorm(x2, sc_map, sh_map, q2, sbuf, eps: float, scale_max: float, cfg: dict | None = None):
    """Three kernels: whole rows with per-row modulation offsets; rows in column chunks read twice
    (two-pass); or, when the modulation is shared by each sample's tokens, programs that read it
    once for many rows. The config cache picks. Returns a direct launcher for
    (x2, scale base, shift base, q2, sbuf) of the same signature (see ``direct_launcher``), or None."""
    m, k = x2.shape
    if m == 0:
        return None
    (sc, sci, sco, scs), (sh, shi, sho, shs) = sc_map, sh_map
    kb = k // 128
    kb_pad = next_pow2(kb)
    m_pad = sbuf.shape[1]
    bcast = shared_modulation(m, sc_map, sh_map)
    n_samples, tokens = (m // sci, sci) if bcast else (1, m)

    def launch(c):
        head = (x2, sc, sh, q2, sbuf, m, m_pad, kb)
        if c.get("KIND") == "bcast":
            grid = (cdiv(tokens + (m_pad - m), c["ROWS"]), n_samples)
            kernel = _adanorm_bcast_kernel
            args = head + (n_samples, tokens, x2.stride(0), q2.stride(0), sbuf.stride(0), sco, sho, eps, scale_max,
                           ref.AMAX_FLOOR, c["ROWS"], c["BLOCK_M"], kb_pad)
        else:
            grid = (cdiv(m_pad, c["BLOCK_M"]),)
            twopass = c.get("KIND") == "twopass"
            kernel = _adanorm_twopass_kernel if twopass else _adanorm_kernel
            args = head + (x2.stride(0), q2.stride(0), sbuf.stride(0), sci, sco, scs, shi, sho, shs, eps, scale_max,
                           ref.AMAX_FLOOR, c["BLOCK_M"], min(c["CHUNK_KB"], kb_pad) if twopass else kb_pad)
        return direct_launcher(kernel[grid](*args, num_warps=c["num_warps"]), grid, args, 5)

    if cfg is not None:
        if cfg.get("KIND") == "bcast" and not bcast:
            raise ValueError("the shared-modulation kernel needs scale/shift shared by each sample's tokens, "
                             f"whole samples and at most {MAX_GRID_Y} of them")
        return launch(cfg)
    key = ("adanorm", k, str(x2.dtype)) + (("shared_mod",) if bcast else ())
    cfg = tuning.choose("quantize", key, _row_cfg(kb_pad), lambda: adanorm_candidates(kb_pad, bcast),
                        lambda c: (lambda: launch(c)), device=x2.device)
    return launch(cfg)


def adanorm_candidates(kb_pad: int, shared_mod: bool) -> list[dict]:
    out = _row_candidates(kb_pad)
    out += [{"KIND": "twopass", "BLOCK_M": bm, "CHUNK_KB": ck, "num_warps": w}
            for bm in (1, 2, 4, 8) for ck in (4, 8, 16) for w in (2, 4, 8)
            if ck <= kb_pad and bm * ck * 128 <= 8192]
    if shared_mod:
        out += [{"KIND": "bcast", "ROWS": r, "BLOCK_M": bm, "num_warps": w}
                for r in (4, 8, 16, 32, 64) for bm in (1, 2, 4) for w in (2, 4, 8)
                if bm <= r and bm * kb_pad * 128 <= 16384]
    return out


def quantize_rms_fma(x2, y2, g_map, q2, sbuf, eps: float, scale_max: float):
    """Returns a direct launcher for (x2, y2, gate base, q2, sbuf) of the same signature (see
    ``direct_launcher``), or None."""
    m, k = x2.shape
    if m == 0:
        return None
    g, gi, go, gs = g_map
    # The kernel writes x in place, so it is never autotuned on live data: heuristic or cached config only.
    kb_pad = next_pow2(k // 128)
    cfg = tuning.lookup("quantize", ("rms_fma", k, str(x2.dtype)), x2.device) or _row_cfg(kb_pad)
    grid = (cdiv(sbuf.shape[1], cfg["BLOCK_M"]),)
    args = (x2, y2, g, q2, sbuf, m, sbuf.shape[1], k // 128, x2.stride(0), y2.stride(0), q2.stride(0),
            sbuf.stride(0), gi, go, gs, eps, scale_max, ref.AMAX_FLOOR, cfg["BLOCK_M"], kb_pad)
    return direct_launcher(_rms_fma_kernel[grid](*args, num_warps=cfg["num_warps"]), grid, args, 5)


def gated_attention(x2, l2, out2, sbuf, nh: int, scale_max: float, quantize_out: bool,
                    cfg: dict | None = None):
    """sbuf None when not quantizing. Returns a direct launcher for (x2, l2, out2, sbuf or out2)
    of the same signature (see ``direct_launcher``), or None."""
    m, k = x2.shape
    # Quantized rows hold whole 128-blocks (the wrapper checks); unquantized ones may be any width,
    # so the grid covers the last partial block too (the kernel masks columns >= K).
    kb = k // 128 if quantize_out else cdiv(k, 128)
    if m == 0 or k == 0:
        return None
    m_pad = sbuf.shape[1] if quantize_out else m

    def launch(c):
        grid = (cdiv(m_pad, c["BLOCK_M"]), cdiv(kb, c["BLOCK_KB"]))
        args = (x2, l2, out2, sbuf if sbuf is not None else out2, m, m_pad, kb, nh,
                x2.stride(0), l2.stride(0), out2.stride(0), sbuf.stride(0) if sbuf is not None else 0,
                scale_max, k // nh, quantize_out, ref.AMAX_FLOOR, c["BLOCK_M"], c["BLOCK_KB"])
        return direct_launcher(_gated_kernel[grid](*args, num_warps=c["num_warps"]), grid, args, 4)

    if cfg is not None:  # given (warmup, tests): no lookup
        return launch(cfg)
    key = ("gated", k, nh, str(x2.dtype), quantize_out)
    cfg = tuning.choose("quantize", key, _chunk_cfg(kb), lambda: _chunk_candidates(kb),
                        lambda c: (lambda: launch(c)), device=x2.device)
    return launch(cfg)


def quantize_weights(w, q, s, scale_max: float) -> None:
    n, k = w.shape
    if n == 0 or k == 0:
        return
    _quantize_weights_kernel[(n // 128, k // 128)](w, q, s, w.stride(0), q.stride(0), k // 128, scale_max,
                                                   AMAX_FLOOR=ref.AMAX_FLOOR, num_warps=8)


def dequantize(q2, scales, out2, rows_per_scale: int):
    """Returns a direct launcher for (q2, scales, out2) of the same signature (see
    ``direct_launcher``), or None."""
    m, k = q2.shape
    if m == 0 or k == 0:
        return None
    # about 8K codes a program, whole rows where K allows (K = 4096: 2 rows of 32 blocks)
    block_kb = min(next_pow2(cdiv(k, 128)), 32)
    block_m = max(1, 64 // block_kb)
    grid = (cdiv(m, block_m), cdiv(k, block_kb * 128))
    args = (q2, scales, out2, m, k, q2.stride(0), out2.stride(0), scales.stride(0), scales.stride(1),
            rows_per_scale, block_m, block_kb)
    return direct_launcher(_dequantize_kernel[grid](*args, num_warps=8), grid, args, 3)
