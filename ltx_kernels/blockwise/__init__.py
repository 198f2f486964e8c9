"""Compatibility surface of upstream ``ltx_kernels.blockwise`` (what ltx-core imports)."""
from . import arch, functional, linear, triton_ops  # noqa: F401
from .functional import (  # noqa: F401
    FP6_SCALE_MAX,
    FP8_SCALE_MAX,
    fp6_blockwise_quantize_weights_torch,
    fp6_pack_tensor,
    fp6_unpack_tensor,
    fp8_blockwise_quantize_weights_torch,
    rms_norm_rope,
    rms_norm_split_rope,
)
from .triton_ops import (  # noqa: F401
    blockwise_dequantize,
    blockwise_quantize_adanorm_triton,
    blockwise_quantize_rms_fma_triton,
    gated_attention_triton,
)
from .linear import BlockwiseFP6Linear, BlockwiseFP8Linear, blockwise_fp8_gemm  # noqa: F401
