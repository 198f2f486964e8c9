"""Upstream-compatible names (ltx_kernels.blockwise.triton_ops) with this package's math:
fp32 sums, eps 1e-6, finite scales for zero blocks, any token count."""
from __future__ import annotations

from .. import quantize as _q


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
    q, scales = xs
    return _q.dequantize_blockwise(q, scales)


blockwise_dequantize_triton = blockwise_dequantize
