"""``ltx_kernels.blockwise.triton_ops``: upstream's names and argument orders over this package's
ops, with this package's math: fp32 sums, eps 1e-6, finite scales for zero blocks, saturating
FP8, any token count.

Activation scales come back as upstream's "TMA-aligned" ``[M, h/128]`` fp32 view (element
(m, kb) at ``m + kb * A4(M)``), which the GEMMs read as is.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .. import _checks as chk
from .. import quantize as _q
from .. import reference as _ref


def get_tma_aligned_size(n: int, element_size: int) -> int:
    """``n`` rounded up to a whole 16-byte line of ``element_size``-byte elements."""
    align = 16 // element_size
    return (n + align - 1) // align * align


def run_quant_blockwise_tma_aligned(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """1x128 blockwise FP8: ``(q [..., h], scales [M, h/128])``."""
    return _q.quantize_blockwise(x)


def run_quant_blockwise_gelu_tma_aligned(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """GELU then 1x128 blockwise FP8. The GELU is the tanh approximation LTX-2's feed-forward
    uses; upstream's kernel applied ``x * sigmoid(1.702 x)`` here (ltx-core does not call it)."""
    return _q.quantize_blockwise(x, gelu=True)


def run_quant_blockwise_norm_tma_aligned(x: torch.Tensor, w: Optional[torch.Tensor], norm_scale: torch.Tensor,
                                         norm_shift: torch.Tensor, out_dtype: torch.dtype = torch.float8_e4m3fn,
                                         hd_scale: Optional[float] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``rms_norm(x) * (1 + norm_scale) + norm_shift`` quantized to 1x128 blockwise FP8.

    ``w``, ``out_dtype`` and ``hd_scale`` exist for upstream's signature; upstream ignored them,
    so anything but ``None`` / float8_e4m3fn / ``None`` or 1.0 (what ltx-core passes) is refused
    rather than silently dropped."""
    if w is not None:
        raise ValueError("w (an affine norm weight) is not supported: pass None, as ltx-core does")
    if out_dtype not in (None, torch.float8_e4m3fn):
        raise TypeError(f"out_dtype must be torch.float8_e4m3fn, got {out_dtype}")
    if hd_scale not in (None, 1.0):
        raise ValueError(f"hd_scale must be None or 1.0, got {hd_scale!r}")
    return _q.quantize_adanorm(x, norm_scale, norm_shift)


def run_quant_blockwise_rms_fma(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``x += y * z`` in place (as upstream), then ``rms_norm(x)`` quantized: ``(q, scales)``."""
    q, s, _ = _q.quantize_rms_fma(x, y, z, inplace=True)
    return q, s


def run_rms_fma(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``x += y * z`` in place (as upstream), then ``rms_norm(x)`` (eps 1e-6) in bf16, as upstream
    returns it for any input dtype. Composed from torch ops: ltx-core runs the quantizing variant."""
    chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    chk.tensor("y", y, dtypes=chk.FLOAT_DTYPES)
    chk.tensor("z", z, dtypes=chk.FLOAT_DTYPES)
    if y.shape != x.shape:
        raise ValueError(f"y must have x's shape {tuple(x.shape)}, got {tuple(y.shape)}")
    if not chk.broadcasts_to(z.shape, x.shape):
        raise ValueError(f"z of shape {tuple(z.shape)} does not broadcast to x's shape {tuple(x.shape)}")
    chk.same_device(x=x, y=y, z=z)
    x.copy_((x.float() + y.float() * z.float()).to(x.dtype))
    return _ref.rms_norm(x.float(), 1e-6).to(torch.bfloat16)


def run_gated_attention(x: torch.Tensor, gate_logits: torch.Tensor, quantize: bool = True):
    """``x * 2 sigmoid(gate_logits)`` per head: ``(q, scales)`` when quantizing, else
    ``(out in bf16, None)`` (upstream's output dtype for any input dtype)."""
    if chk.flag("quantize", quantize):
        return _q.gated_attention(x, gate_logits, True)
    chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    # one rounding, from fp32 (an fp16 result would round twice, and overflow past 65504)
    src = x if x.dtype in (torch.bfloat16, torch.float32) else x.float()
    out, _ = _q.gated_attention(src, gate_logits, False)
    return out.to(torch.bfloat16), None


def run_blockwise_dequantize(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """bf16 ``x * scale`` per 1x128 block; scales ``[M, h/128]`` with any strides."""
    return _q.dequantize_blockwise(x, scales)


def run_quantize_kernel(x: torch.Tensor, out_dtype: Optional[torch.dtype] = None):
    """Per-row symmetric int8: ``(q, scale)`` with ``x ~= q * scale``, ``scale = amax / 127`` per
    row (a zero row gets scale 1), rounded to nearest (upstream's kernel truncated)."""
    chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    if out_dtype not in (None, torch.int8):
        raise TypeError(f"out_dtype must be torch.int8, got {out_dtype}")
    xf = x.float()
    a = xf.abs()
    # NaN leaves its row's scale alone (and gets code 0); an empty row gets scale 1, as a zero row
    amax = torch.where(a.isnan(), 0.0, a).amax(dim=-1, keepdim=True) if x.shape[-1] else a.new_zeros(*x.shape[:-1], 1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(xf / scale).nan_to_num(0.0).clamp(-127, 127).to(torch.int8)
    return q, scale.squeeze(-1)


rowwise_int_quantize_triton = run_quantize_kernel
blockwise_quantize_adanorm_triton = run_quant_blockwise_norm_tma_aligned
blockwise_quantize_triton = run_quant_blockwise_tma_aligned
blockwise_quantize_gelu_triton = run_quant_blockwise_gelu_tma_aligned
blockwise_quantize_rms_fma_triton = run_quant_blockwise_rms_fma
rms_fma_triton = run_rms_fma
gated_attention_triton = run_gated_attention
blockwise_dequantize_triton = run_blockwise_dequantize
