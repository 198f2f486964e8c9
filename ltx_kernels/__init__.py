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
