"""Upstream's ``ltx_kernels.vae`` names (CuTe DSL kernels for LTX-2's diffusion VAE decoder),
answering that this package does not have them.

Those kernels are built on ``tcgen05`` MMA and Tensor Memory, which only datacenter Blackwell
(sm_100 / sm_103) has; no GPU this package is built and validated on does. The availability
predicates answer False, so ltx-core takes its other attention path or raises its own error; the
kernel entry points raise RuntimeError with :data:`UNSUPPORTED_MESSAGE`. The load-time weight
transforms (``softmax_row_bound``, ``pack_fused_ctx_weights``) are plain torch and work.
"""
from __future__ import annotations

UNSUPPORTED_MESSAGE = (
    "ltx_kernels.vae is not implemented by this ltx_kernels package: its CuTe DSL kernels need "
    "tcgen05 MMA and Tensor Memory (datacenter Blackwell, sm_100 / sm_103); use ltx-core's other "
    "VAE attention paths")

from .weights import pack_fused_ctx_weights, softmax_row_bound

# Rows of slack upstream's fused kernel stores past a block volume's end (its 128-row tile);
# ltx-core sizes the volumes it allocates for that path with it.
OUT_SLACK_ROWS = 128


def gpu_supports_dsl_kernels(device_index: int = 0) -> bool:
    return False


def block_fna_available(device_index: int = 0) -> bool:
    """Whether the fused neighborhood-attention block kernel can run: never with this package."""
    return False


def na_attn_available(device_index: int = 0) -> bool:
    """Whether the standalone neighborhood-attention kernel can run: never with this package."""
    return False


def fna_supported(*, C: int, Ctx: int, Hidd: int, num_heads: int, kernel_size, T: int, H: int, W: int,
                  tile_thw=None, upsample_stride=(1, 1, 1)) -> bool:
    """Whether this package's kernels serve the block shape: none does."""
    return False


def na_supported(*, num_heads: int, head_dim: int, kernel_size, T: int, H: int, W: int, tile_thw=None) -> bool:
    """Whether this package's kernels serve the attention shape: none does."""
    return False


def _unsupported(*args, **kwargs):
    raise RuntimeError(UNSUPPORTED_MESSAGE)


run_block_fna_dsl = _unsupported
run_na_attention = _unsupported
run_na_attention_bound = _unsupported

__all__ = [
    "OUT_SLACK_ROWS",
    "block_fna_available",
    "fna_supported",
    "na_attn_available",
    "na_supported",
    "pack_fused_ctx_weights",
    "run_block_fna_dsl",
    "run_na_attention",
    "run_na_attention_bound",
    "softmax_row_bound",
]
