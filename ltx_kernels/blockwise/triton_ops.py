"""Upstream-compatible names (ltx_kernels.blockwise.triton_ops) with this package's math:
fp32 sums, eps 1e-6, finite scales for zero blocks, any token count."""
from __future__ import annotations

import torch

from .. import quantize as _q
from .. import reference as _ref


def get_tma_aligned_size(n: int, element_size: int) -> int:
    align = 16 // element_size
    return (n + align - 1) // align * align


def blockwise_quantize_triton(x):
    return _q.quantize_blockwise(x)


def blockwise_quantize_gelu_triton(x):
    """GELU then quantize. Note: tanh GELU (the model's), not upstream's unused quick-GELU."""
    return _q.quantize_blockwise(x, gelu=True)


def blockwise_quantize_adanorm_triton(x, w, norm_scale, norm_shift, out_dtype=None, hd_scale=None):
    """rms_norm(x) * (1 + scale) + shift, quantized. Like upstream, ``w``, ``out_dtype`` and
    ``hd_scale`` are accepted for signature compatibility and must be unused (None / 1.0)."""
    if w is not None:
        raise ValueError("w (an affine norm weight) is not supported: pass None as ltx-core does")
    return _q.quantize_adanorm(x, norm_scale, norm_shift)


def blockwise_quantize_rms_fma_triton(x, y, z):
    """x += y*z in place (as upstream), then rms-norm + quantize; returns (q, scales)."""
    q, s, _ = _q.quantize_rms_fma(x, y, z, inplace=True)
    return q, s


def gated_attention_triton(x, gate_logits, quantize=True):
    return _q.gated_attention(x, gate_logits, quantize)


def blockwise_dequantize(xs):
    """``q * scales`` for the ``(q, scales)`` pair a quantizer returned."""
    if not isinstance(xs, (tuple, list)) or len(xs) != 2:
        got = type(xs).__name__ + (f" of {len(xs)} items" if isinstance(xs, (tuple, list)) else "")
        raise TypeError(f"xs must be a (q, scales) pair as the quantizers return, got a {got}")
    q, scales = xs
    return _q.dequantize_blockwise(q, scales)


blockwise_dequantize_triton = blockwise_dequantize


def rms_fma_triton(x, y, z, eps=1e-6):
    """``x += y * z`` in place (as upstream), then ``rms_norm(x)`` in x's dtype (with eps, which
    upstream lacked). Composed from torch ops: ltx-core uses the quantizing variant."""
    x.copy_((x.float() + y.float() * z.float()).to(x.dtype))
    return _ref.rms_norm(x.float(), eps).to(x.dtype)


def rowwise_int_quantize_triton(x, out_dtype=None):
    """Per-row symmetric int8 quantization: ``(q, scale)`` with ``x ~= q * scale``, scale = amax/127
    per row (a zero row gets scale 1). Rounds to nearest; upstream's version truncated."""
    out_dtype = torch.int8 if out_dtype is None else out_dtype
    if out_dtype != torch.int8:
        raise TypeError(f"out_dtype must be torch.int8, got {out_dtype}")
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(xf / scale).clamp(-127, 127).to(torch.int8)
    return q, scale.squeeze(-1)
