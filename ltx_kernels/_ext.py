"""Loading the compiled CUDA extensions (built by setup.py when a CUDA toolchain is present)."""
from __future__ import annotations

import functools
import importlib

import torch

EXTENSIONS = {
    "_C_all2all": "CUDA-IPC All2All (csrc/all2all)",
    "_C_gemm_sm90": "SM90 wgmma/TMA blockwise FP8 GEMM (csrc/gemm_sm90)",
}


@functools.lru_cache(maxsize=None)
def load(name: str):
    """(module, None) or (None, reason)."""
    try:
        return importlib.import_module(f"ltx_kernels.{name}"), None
    except ImportError as e:
        msg = str(e)
        if "No module named" in msg:
            return None, f"extension ltx_kernels.{name} not built (install with a CUDA toolchain; see README)"
        return None, f"extension ltx_kernels.{name} failed to load: {msg}"


def reasons(name: str, *tensors, arch: tuple | None = None) -> list:
    mod, why = load(name)
    if mod is None:
        return [why]
    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        return [f"tensors on different devices: {sorted(map(str, devs))}"]
    dev = next(iter(devs)) if devs else None
    if dev is None or dev.type != "cuda":
        return ["needs CUDA tensors"]
    if arch is not None and torch.cuda.get_device_capability(dev) != arch:
        cap = torch.cuda.get_device_capability(dev)
        return [f"built for sm_{arch[0]}{arch[1]}, device is sm_{cap[0]}{cap[1]}"]
    return []
