"""``ltx_kernels.arch`` (upstream's module path): the coarse GPU family name.

Upstream picked its FP8 GEMM by this name; this package dispatches per op and per input instead
(``python -m ltx_kernels`` shows the choice), and keeps the function for callers that branch on it.
"""
from __future__ import annotations

import functools

import torch

_FAMILIES = {(8, 9): "ada", (9, 0): "hopper"}


@functools.lru_cache(maxsize=16)
def _family(major: int, minor: int) -> str:
    if (major, minor) in _FAMILIES:
        return _FAMILIES[(major, minor)]
    if major == 8 and minor < 9:
        return "ampere"
    if major in (10, 12):
        return "blackwell"
    raise NotImplementedError(f"unsupported GPU compute capability sm_{major}{minor}")


def get_device_arch(device=None) -> str:
    """"ampere" (sm_80-87), "ada" (sm_89), "hopper" (sm_90) or "blackwell" (sm_100 / sm_120) for
    ``device`` (default: the current CUDA device).

    Raises RuntimeError without a CUDA device and NotImplementedError for another capability,
    as upstream does."""
    if not torch.cuda.is_available():
        raise RuntimeError("get_device_arch: CUDA is not available (no CUDA device is visible)")
    return _family(*torch.cuda.get_device_capability(device))
