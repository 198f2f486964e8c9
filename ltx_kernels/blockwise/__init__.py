"""``ltx_kernels.blockwise``: the blockwise FP8/FP6 surface ltx-core imports (upstream's module
paths, names and signatures) over this package's ops.

Unlike upstream's, importing it needs no compiled extension and no GPU: the dispatcher picks
a backend per call (``python -m ltx_kernels`` shows which).
"""
from . import arch, functional, linear, triton_ops  # noqa: F401
from .functional import (
    FP6_SCALE_MAX,
    FP8_SCALE_MAX,
    blockwise_dequantize,
    blockwise_quantize_adanorm_triton,
    blockwise_quantize_rms_fma_triton,
    fp6_blockwise_quantize_weights_torch,
    fp6_pack_tensor,
    fp6_unpack_tensor,
    fp8_blockwise_quantize_weights_torch,
    gated_attention_triton,
    rms_norm_rope,
    rms_norm_split_rope,
)
from .linear import BlockwiseFP6Linear, BlockwiseFP8Linear, BlockwiseLinear, blockwise_fp8_gemm

__all__ = [
    "BlockwiseFP6Linear",
    "BlockwiseFP8Linear",
    "blockwise_dequantize",
    "blockwise_quantize_adanorm_triton",
    "blockwise_quantize_rms_fma_triton",
    "fp6_blockwise_quantize_weights_torch",
    "fp6_pack_tensor",
    "fp6_unpack_tensor",
    "fp8_blockwise_quantize_weights_torch",
    "gated_attention_triton",
    "rms_norm_rope",
    "rms_norm_split_rope",
    # beyond upstream's list
    "BlockwiseLinear",
    "FP6_SCALE_MAX",
    "FP8_SCALE_MAX",
    "blockwise_fp8_gemm",
]
