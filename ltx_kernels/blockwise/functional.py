"""``ltx_kernels.blockwise.functional``: upstream's names, parameters and return structures,
mapped onto this package's ops (fp32 sums, finite scales for all-zero blocks, saturating FP8,
any token count).

ltx-core imports ten names from here (see ``tests/test_upstream_surface.py``); the rest are the
module's other public names upstream, kept so that code written against upstream runs unchanged.
"""
from __future__ import annotations

import math
from typing import Tuple

import torch

from .. import fp6 as _fp6
from .. import norm_rope as _nr
from .. import quantize as _q
from .. import reference as _ref
from .triton_ops import (  # noqa: F401  (upstream re-exports these from this module)
    blockwise_dequantize_triton,
    blockwise_quantize_adanorm_triton,
    blockwise_quantize_rms_fma_triton,
    blockwise_quantize_triton,
    gated_attention_triton,
)

FP8_SCALE_MAX = _ref.FP8_SCALE_MAX  # 448.0, the e4m3fn maximum
FP6_SCALE_MAX = _ref.FP6_SCALE_MAX  # 0.1172: every code of a block scaled to it survives fp6_pack

rms_norm_rope = _nr.rms_norm_rope
rms_norm_split_rope = _nr.rms_norm_split_rope


def rms_norm_rope_cuda(x, weights, cos_freqs, sin_freqs, out_16bit):
    """Upstream's extension-level argument order: ``(x, weights, cos, sin, out_16bit)``."""
    return _nr.rms_norm_rope(x, cos_freqs, sin_freqs, weights, not out_16bit)


def rms_norm_split_rope_cuda(x, sin_freqs, cos_freqs, weights, out_fp8):
    """Upstream's extension-level argument order: ``(x, sin, cos, weights, out_fp8)``."""
    return _nr.rms_norm_split_rope(x, cos_freqs, sin_freqs, weights, out_fp8)


class RMSNormRope(torch.autograd.Function):
    """``RMSNormRope.apply(x, weights, cos_freqs, sin_freqs, out_16bit)``; forward only."""

    @staticmethod
    def forward(ctx, x, weights, cos_freqs, sin_freqs, out_16bit):
        return rms_norm_rope_cuda(x, weights, cos_freqs, sin_freqs, out_16bit)


class RMSNormSplitRope(torch.autograd.Function):
    """``RMSNormSplitRope.apply(x, sin_freqs, cos_freqs, weights, out_fp8)``; forward only."""

    @staticmethod
    def forward(ctx, x, sin_freqs, cos_freqs, weights, out_fp8):
        return rms_norm_split_rope_cuda(x, sin_freqs, cos_freqs, weights, out_fp8)


def _check_block_size(block_size) -> None:
    if block_size != 128:
        raise ValueError(f"block_size must be 128 (the FP8 GEMM's block), got {block_size!r}")


def blockwise_quantize_weights(w: torch.Tensor, block_size=128, scale_max=FP8_SCALE_MAX
                               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """128x128 blocks of ``w [N, K]`` -> ``(q float8_e4m3fn [N, K], scale fp32 [N/128, K/128])``
    with ``w ~= q * scale`` per block.

    Computed step for step as upstream's function computes it (the block's factor
    ``scale_max * (1 / amax)`` in fp32, codes ``w * factor``, stored scale ``1 / factor``), so
    ltx-core's load-time quantization gives upstream's codes and scales bit for bit (the package's
    ``quantize_weights_blockwise`` divides instead, ``scale_max / amax``: on a random 512 x 512 bf16
    weight, 144 of its 262,144 codes land one e4m3 step away). Unlike upstream's, an all-zero block gets
    zero codes and a finite scale, and a NaN element does not spoil its block."""
    _check_block_size(block_size)
    scale_max = _q.check_weights(w, scale_max)
    n, k = w.shape
    # (in place where it can: ltx-core runs this on every weight of a checkpoint at load)
    blocks = w.float().reshape(n // 128, 128, k // 128, 128).transpose(1, 2)
    amax = blocks.abs().nan_to_num_(0.0, posinf=math.inf).amax(dim=(-2, -1)).clamp_min_(_ref.AMAX_FLOOR)
    factor = amax.reciprocal() * scale_max
    scaled = (blocks * factor[:, :, None, None]).clamp_(-_ref.FP8_MAX, _ref.FP8_MAX)
    # (row-major codes whatever w's strides: a checkpoint stores them as they are)
    return scaled.to(torch.float8_e4m3fn).transpose(1, 2).reshape(n, k).contiguous(), factor.reciprocal()


def fp8_blockwise_quantize_weights_torch(x: torch.Tensor, block_size=128) -> Tuple[torch.Tensor, torch.Tensor]:
    return blockwise_quantize_weights(x, block_size, FP8_SCALE_MAX)


def fp6_blockwise_quantize_weights_torch(x: torch.Tensor, block_size=128) -> Tuple[torch.Tensor, torch.Tensor]:
    """Like the FP8 one, with codes scaled to ``FP6_SCALE_MAX`` (still e4m3; pack them with
    :func:`fp6_pack_tensor`)."""
    return blockwise_quantize_weights(x, block_size, FP6_SCALE_MAX)


def blockwise_quantize_torch(x: torch.Tensor, block_size=128, scale_max=FP8_SCALE_MAX
                             ) -> Tuple[torch.Tensor, torch.Tensor]:
    """1x128 blocks of ``x [..., h]`` -> ``(q [..., h], scales)`` with the scales as a contiguous
    ``[h/128, M]`` tensor (M = rows of x), the layout upstream's torch path returns."""
    _check_block_size(block_size)
    q, s = _q.quantize_blockwise(x, scale_max=scale_max)
    return q, s.t().contiguous()


def blockwise_dequantize(x: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``(q, scales)`` -> bf16 ``q * scale`` per 1x128 block (scales ``[M, h/128]``, any strides)."""
    return blockwise_dequantize_triton(*_as_pair("x", x))


def _as_pair(name, x):
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"{name} must be a (q, scales) pair, got {type(x).__name__}"
                        + (f" of {len(x)} items" if isinstance(x, (tuple, list)) else ""))
    return x


def fp6_pack(x: torch.Tensor) -> torch.Tensor:
    """Upstream's extension-level name of :func:`fp6_pack_tensor`."""
    return _fp6.fp6_pack(x)


def fp6_unpack(x: torch.Tensor, original_n: int) -> torch.Tensor:
    """Upstream's extension-level name of :func:`fp6_unpack_tensor`."""
    return _fp6.fp6_unpack(x, original_n)


def fp6_pack_tensor(x: torch.Tensor) -> torch.Tensor:
    """uint8 / float8_e4m3fn codes ``[m, n]`` (FP6-representable) -> packed uint8 ``[m, 3n/4]``."""
    return _fp6.fp6_pack(x)


def fp6_unpack_tensor(x: torch.Tensor, original_n: int) -> torch.Tensor:
    """Packed uint8 ``[m, 3n/4]`` -> uint8 codes ``[m, original_n]`` (view as float8_e4m3fn)."""
    return _fp6.fp6_unpack(x, original_n)


__all__ = [
    "FP6_SCALE_MAX", "FP8_SCALE_MAX", "RMSNormRope", "RMSNormSplitRope",
    "blockwise_dequantize", "blockwise_dequantize_triton", "blockwise_quantize_adanorm_triton",
    "blockwise_quantize_rms_fma_triton", "blockwise_quantize_torch", "blockwise_quantize_triton",
    "blockwise_quantize_weights", "fp6_blockwise_quantize_weights_torch", "fp6_pack", "fp6_pack_tensor",
    "fp6_unpack", "fp6_unpack_tensor", "fp8_blockwise_quantize_weights_torch", "gated_attention_triton",
    "rms_norm_rope", "rms_norm_rope_cuda", "rms_norm_split_rope", "rms_norm_split_rope_cuda",
]
