"""FP6 pack / unpack: e4m3 bytes <-> 6-bit codes, 4 codes in 3 bytes MSB-first.

The tensor is one flat stream of 4-byte groups (n % 4 == 0, so groups never
straddle rows). A program moves BLOCK quads of 4 groups: 16 bytes as four
32-bit words on the fp8 side, 12 bytes as three words on the packed side, so
both sides use whole-word accesses. What is left past the last whole quad
(under 16 bytes of fp8) goes through the torch reference.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import reference as ref
from .. import tuning
from . import cdiv, direct_launcher


@triton.jit
def _code(w, shift: tl.constexpr):
    b = (w >> shift) & 0xFF
    return ((b >> 7) << 5) | (b & 0x1F)


@triton.jit
def _byte(g, shift: tl.constexpr):
    c = (g >> shift) & 0x3F
    return ((c >> 5) << 7) | (c & 0x1F)


@triton.jit
def _be(g, k: tl.constexpr):
    """Byte k (0 = most significant) of a 24-bit group."""
    return (g >> (16 - 8 * k)) & 0xFF


@triton.jit
def _pack_kernel(in_ptr, out_ptr, Q, BLOCK: tl.constexpr):
    q = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = q < Q
    w = tl.load(in_ptr + q[:, None] * 4 + tl.arange(0, 4)[None, :], mask=mask[:, None], other=0)
    w = w.to(tl.uint32, bitcast=True)
    g = (_code(w, 0) << 18) | (_code(w, 8) << 12) | (_code(w, 16) << 6) | _code(w, 24)
    even, odd = tl.split(tl.reshape(g, (BLOCK, 2, 2)))
    g0, g2 = tl.split(even)
    g1, g3 = tl.split(odd)
    w0 = _be(g0, 0) | (_be(g0, 1) << 8) | (_be(g0, 2) << 16) | (_be(g1, 0) << 24)
    w1 = _be(g1, 1) | (_be(g1, 2) << 8) | (_be(g2, 0) << 16) | (_be(g2, 1) << 24)
    w2 = _be(g2, 2) | (_be(g3, 0) << 8) | (_be(g3, 1) << 16) | (_be(g3, 2) << 24)
    base = out_ptr + q * 3
    tl.store(base, w0.to(tl.int32, bitcast=True), mask=mask)
    tl.store(base + 1, w1.to(tl.int32, bitcast=True), mask=mask)
    tl.store(base + 2, w2.to(tl.int32, bitcast=True), mask=mask)


@triton.jit
def _unpack_kernel(in_ptr, out_ptr, Q, BLOCK: tl.constexpr):
    q = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = q < Q
    base = in_ptr + q * 3
    w0 = tl.load(base, mask=mask, other=0).to(tl.uint32, bitcast=True)
    w1 = tl.load(base + 1, mask=mask, other=0).to(tl.uint32, bitcast=True)
    w2 = tl.load(base + 2, mask=mask, other=0).to(tl.uint32, bitcast=True)
    # stream bytes s0..s11 are the little-endian bytes of w0, w1, w2
    g0 = ((w0 & 0xFF) << 16) | (w0 & 0xFF00) | ((w0 >> 16) & 0xFF)
    g1 = ((w0 >> 24) << 16) | ((w1 & 0xFF) << 8) | ((w1 >> 8) & 0xFF)
    g2 = (((w1 >> 16) & 0xFF) << 16) | ((w1 >> 24) << 8) | (w2 & 0xFF)
    g3 = (((w2 >> 8) & 0xFF) << 16) | (((w2 >> 16) & 0xFF) << 8) | (w2 >> 24)
    o0 = _byte(g0, 18) | (_byte(g0, 12) << 8) | (_byte(g0, 6) << 16) | (_byte(g0, 0) << 24)
    o1 = _byte(g1, 18) | (_byte(g1, 12) << 8) | (_byte(g1, 6) << 16) | (_byte(g1, 0) << 24)
    o2 = _byte(g2, 18) | (_byte(g2, 12) << 8) | (_byte(g2, 6) << 16) | (_byte(g2, 0) << 24)
    o3 = _byte(g3, 18) | (_byte(g3, 12) << 8) | (_byte(g3, 6) << 16) | (_byte(g3, 0) << 24)
    o = tl.reshape(tl.join(tl.join(o0, o2), tl.join(o1, o3)), (BLOCK, 4))
    tl.store(out_ptr + q[:, None] * 4 + tl.arange(0, 4)[None, :], o.to(tl.int32, bitcast=True),
             mask=mask[:, None])


_HEURISTIC = {"BLOCK": 1024, "num_warps": 8}


def _candidates():
    return [{"BLOCK": b, "num_warps": w} for b in (256, 512, 1024, 2048, 4096) for w in (4, 8, 16)
            if b // (32 * w) >= 1]


def _launch(kernel, src_words, dst_words, quads, cfg):
    grid = (cdiv(quads, cfg["BLOCK"]),)
    args = (src_words, dst_words, quads, cfg["BLOCK"])
    return direct_launcher(kernel[grid](*args, num_warps=cfg["num_warps"]), grid, args, 2)


def _run(kind: str, kernel, src: torch.Tensor, dst: torch.Tensor, quads: int):
    if quads == 0:
        return None
    sw, dw = src.view(torch.int32), dst.view(torch.int32)
    cfg = tuning.choose("fp6", (kind,), _HEURISTIC, _candidates,
                        lambda c: (lambda: _launch(kernel, sw, dw, quads, c)), device=src.device)
    return _launch(kernel, sw, dw, quads, cfg)


def fp6_pack(flat: torch.Tensor, out: torch.Tensor):
    """flat: contiguous uint8 [E] (E % 4 == 0); out: uint8 [3E/4]. Returns a direct launcher for
    the int32 views of (flat, out) of the same signature when E % 16 == 0 (see
    ``direct_launcher``), else None."""
    quads = flat.numel() // 16
    launch = _run("pack", _pack_kernel, flat[: quads * 16], out[: quads * 12], quads)
    if flat.numel() > quads * 16:
        out[quads * 12:] = ref.fp6_pack(flat[quads * 16:])
        return None
    return launch


def fp6_unpack(flat: torch.Tensor, out: torch.Tensor):
    """flat: contiguous uint8 [3E/4]; out: uint8 [E]. Returns a direct launcher for the int32 views
    of (flat, out) of the same signature when E % 16 == 0 (see ``direct_launcher``), else None."""
    quads = out.numel() // 16
    launch = _run("unpack", _unpack_kernel, flat[: quads * 12], out[: quads * 16], quads)
    if out.numel() > quads * 16:
        tail = out.numel() - quads * 16
        out[quads * 16:] = ref.fp6_unpack(flat[quads * 12:], tail)
        return None
    return launch
