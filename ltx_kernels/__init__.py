"""ltx_kernels: fast kernels for LTX-2 video generation (RMSNorm+RoPE, FP6, blockwise FP8)."""
from __future__ import annotations

__version__ = "0.1.0"

from ._dispatch import BackendUnavailable  # noqa: E402
from .norm_rope import rms_norm_rope, rms_norm_split_rope  # noqa: E402

__all__ = [
    "BackendUnavailable",
    "rms_norm_rope",
    "rms_norm_split_rope",
]

from .fp6 import FP6RangeError, fp6_check, fp6_pack, fp6_unpack  # noqa: E402
from .gemm import fp8_gemm_nt  # noqa: E402
from .quantize import (  # noqa: E402
    FP6_SCALE_MAX,
    FP8_SCALE_MAX,
    dequantize_blockwise,
    gated_attention,
    quantize_adanorm,
    quantize_blockwise,
    quantize_rms_fma,
    quantize_weights_blockwise,
)

__all__ += [
    "FP6RangeError", "fp6_check", "fp6_pack", "fp6_unpack", "fp8_gemm_nt", "FP6_SCALE_MAX", "FP8_SCALE_MAX",
    "dequantize_blockwise", "gated_attention", "quantize_adanorm", "quantize_blockwise", "quantize_rms_fma",
    "quantize_weights_blockwise",
]

from .linear import BlockwiseFP6Linear, BlockwiseFP8Linear  # noqa: E402

__all__ += ["BlockwiseFP6Linear", "BlockwiseFP8Linear"]

from .all2all import All2All, All2AllTimeout  # noqa: E402

__all__ += ["All2All", "All2AllTimeout"]
