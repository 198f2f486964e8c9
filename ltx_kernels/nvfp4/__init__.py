"""Upstream's ``ltx_kernels.nvfp4`` names; this package has no NVFP4 kernels (see
:func:`unavailable_reason`)."""
from .functional import (
    E2M1_MAX,
    E4M3_MAX,
    GLOBAL_RANGE,
    REBUILD_HINT,
    dequantize_nvfp4,
    fixed_scale_one,
    is_available,
    linear_nvfp4,
    per_tensor_decode_scale,
    quantize_nvfp4,
    scale_shape,
    scaled_mm_nvfp4,
    unavailable_reason,
)

__all__ = [
    "E2M1_MAX",
    "E4M3_MAX",
    "GLOBAL_RANGE",
    "REBUILD_HINT",
    "dequantize_nvfp4",
    "fixed_scale_one",
    "is_available",
    "linear_nvfp4",
    "per_tensor_decode_scale",
    "quantize_nvfp4",
    "scale_shape",
    "scaled_mm_nvfp4",
    "unavailable_reason",
]
