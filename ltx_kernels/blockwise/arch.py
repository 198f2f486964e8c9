"""``ltx_kernels.blockwise.arch`` of upstream: the GPU family name its dispatch keyed on."""
from __future__ import annotations

import torch


def get_device_arch(device=None) -> str:
    """"ampere" (sm_80-87), "ada" (sm_89), "hopper" (sm_90), "blackwell" (sm_100/sm_120).

    This package dispatches per op and per input (see ``python -m ltx_kernels``); the name is kept
    for callers that branch on it. Raises RuntimeError without a CUDA device.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("get_device_arch: no CUDA device is visible")
    major, minor = torch.cuda.get_device_capability(device)
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    if major == 9:
        return "hopper"
    if major in (10, 12):
        return "blackwell"
    raise RuntimeError(f"get_device_arch: unknown compute capability sm_{major}{minor}")
