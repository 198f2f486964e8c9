"""``ltx_kernels.nvfp4``: upstream's NVFP4 names, answering that this package has no NVFP4 kernels.

NVFP4 (FP4 E2M1 codes with FP8 E4M3 scales per 16 elements) needs Blackwell's FP4 tensor cores
(sm_100 / sm_120). This package does not implement it: no GPU it is built and validated on has
them. :func:`unavailable_reason` says so, which is what ltx-core asks before building its NVFP4
policies, so ltx-core raises its own clear error instead of failing on a missing extension. The
layout helpers are real (they are facts of the format); every kernel entry point raises.
"""
from __future__ import annotations

from typing import Optional

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
GLOBAL_RANGE = E4M3_MAX * E2M1_MAX  # 2688: amax maps to the largest FP4 code times the largest scale
BLOCK_SIZE = 16
QUANT_KERNEL_ELEMENTWISE = 1
QUANT_KERNEL_TILED = 2

REBUILD_HINT = "use the blockwise FP8/FP6 path (ltx_kernels.blockwise, ltx-core's blockwise policies)"


def _device_note() -> str:
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    major, minor = torch.cuda.get_device_capability()
    fp4 = "has" if major >= 10 else "has no"
    return f"this device is sm_{major}{minor}, which {fp4} FP4 tensor cores"


def unavailable_reason() -> str:
    """Why NVFP4 cannot run here: always a reason, since this package does not implement it."""
    return (f"ltx_kernels.nvfp4: this ltx_kernels package has no NVFP4 kernels (NVFP4 needs Blackwell "
            f"FP4 tensor cores, sm_100 / sm_120; {_device_note()}); {REBUILD_HINT}")


def is_available() -> bool:
    return False


def _unavailable(*args, **kwargs):
    raise RuntimeError(unavailable_reason())


def _round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


def scale_shape(rows: int, k: int) -> tuple[int, int]:
    """Shape of the block-scale array of a ``[rows, k]`` operand in cuBLAS's 128x4 tiled layout."""
    return _round_up(rows, 128), _round_up(k // BLOCK_SIZE, 4)


def per_tensor_decode_scale(x: torch.Tensor) -> torch.Tensor:
    """``amax(|x|) / GLOBAL_RANGE`` as an fp32 scalar, NaNs ignored (the decode convention)."""
    return (x.detach().float().abs().nan_to_num(nan=0.0).amax() / GLOBAL_RANGE).reshape(())


def fixed_scale_one(device: torch.device) -> torch.Tensor:
    """An fp32 scalar 1.0 on ``device`` (the fixed per-tensor activation scale)."""
    return torch.ones((), device=device, dtype=torch.float32)


def quantize_nvfp4(x: torch.Tensor, per_tensor_scale: torch.Tensor, *, pad_16x: bool = True, hi_first: bool = True,
                   variant: int = QUANT_KERNEL_TILED):
    """Not implemented here: raises RuntimeError with :func:`unavailable_reason`."""
    _unavailable()


def scaled_mm_nvfp4(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                    block_a: torch.Tensor, block_b: torch.Tensor, *, bias: Optional[torch.Tensor] = None,
                    out_dtype: torch.dtype = torch.bfloat16, alpha: Optional[torch.Tensor] = None):
    """Not implemented here: raises RuntimeError with :func:`unavailable_reason`."""
    _unavailable()


def dequantize_nvfp4(packed: torch.Tensor, per_tensor_scale: torch.Tensor, block_scales: torch.Tensor, *,
                     out_dtype: torch.dtype = torch.bfloat16, hi_first: bool = True):
    """Not implemented here: raises RuntimeError with :func:`unavailable_reason`."""
    _unavailable()


def linear_nvfp4(x: torch.Tensor, weight: torch.Tensor, weight_block_scale: torch.Tensor,
                 weight_scale: torch.Tensor, *, bias: Optional[torch.Tensor] = None,
                 act_scale: Optional[torch.Tensor] = None, hi_first: bool = True,
                 out_dtype: torch.dtype = torch.bfloat16):
    """Not implemented here: raises RuntimeError with :func:`unavailable_reason`."""
    _unavailable()
