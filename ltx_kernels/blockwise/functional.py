"""Upstream-compatible names (ltx_kernels.blockwise.functional) mapped onto this package's ops."""
from __future__ import annotations

from .. import fp6 as _fp6
from .. import norm_rope as _nr
from .. import quantize as _q
from .. import reference as _ref

FP8_SCALE_MAX = _ref.FP8_SCALE_MAX
FP6_SCALE_MAX = _ref.FP6_SCALE_MAX
rms_norm_rope = _nr.rms_norm_rope
rms_norm_split_rope = _nr.rms_norm_split_rope


def blockwise_quantize_weights(w, block_size=128, scale_max=FP8_SCALE_MAX):
    if block_size != 128:
        raise ValueError(f"block_size must be 128, got {block_size}")
    return _q.quantize_weights_blockwise(w, scale_max=scale_max)


def fp8_blockwise_quantize_weights_torch(w):
    return _q.quantize_weights_blockwise(w, scale_max=FP8_SCALE_MAX)


def fp6_blockwise_quantize_weights_torch(w):
    return _q.quantize_weights_blockwise(w, scale_max=FP6_SCALE_MAX)


def blockwise_quantize_torch(x):
    """Upstream's torch path: scales as a contiguous [h/128, b*n] tensor (MN-major)."""
    q, s = _q.quantize_blockwise(x)
    return q, s.t().contiguous()


def fp6_pack_tensor(x):
    return _fp6.fp6_pack(x)


def fp6_unpack_tensor(p, original_n):
    return _fp6.fp6_unpack(p, original_n)
