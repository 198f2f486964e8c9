"""The compiled CUDA extensions: the module setup.py built ahead of time, else one compiled on first
use and cached (``_jit``).

An extension is loaded, and compiled if need be, only when something can use it: a CUDA tensor on
a GPU of an arch it is built for (``reasons``), an All2All on CUDA devices, ``python -m ltx_kernels``
on a GPU machine, or ``python -m ltx_kernels build``.
"""
from __future__ import annotations

import functools
import importlib
import threading

import torch

from . import _build_config as cfg
from . import _jit
from ._dispatch import log

EXTENSIONS = {name: s.what for name, s in cfg.EXTENSIONS.items()}
# name -> how the loaded module came to be: {"origin": "prebuilt" | "cache" | "compiled", "path", "targets"}
_info: dict[str, dict] = {}
_lock = threading.Lock()


def _prebuilt(name: str):
    """(module, None) or (None, why there is no usable prebuilt module)."""
    full = f"ltx_kernels.{name}"
    if name in _jit.imported:  # registered under that name by the compile cache, not by setup.py
        return None, "not prebuilt"
    try:
        mod = importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name == full:
            return None, "not prebuilt"
        return None, f"the prebuilt module failed to load ({e})"
    except ImportError as e:  # e.g. built against another torch: undefined symbols
        return None, f"the prebuilt module failed to load ({e})"
    return mod, None


@functools.lru_cache(maxsize=None)
def load(name: str):
    """(module, None) or (None, the exact reason it is unavailable). Compiles on first use (once per
    process: a failure is remembered)."""
    cfg.spec(name)
    with _lock:
        mod, pre_why = _prebuilt(name)
        if mod is not None:
            _info[name] = {"origin": "prebuilt", "path": getattr(mod, "__file__", "?"), "targets": None}
            log.debug("%s: prebuilt module %s", name, _info[name]["path"])
            return mod, None
        if not _jit.jit_enabled():
            why = f"ltx_kernels.{name} is {pre_why}, and compiling on first use is off (LTX_KERNELS_JIT=0)"
            log.debug("%s", why)
            return None, why
        return _load_jit(name, pre_why)


def _load_jit(name: str, pre_why: str, **ensure_kwargs):
    path, meta = _jit.ensure(name, **ensure_kwargs)
    if path is None:
        why = f"ltx_kernels.{name} is {pre_why} and cannot be compiled here: {meta}"
        log.debug("%s", why)
        return None, why
    try:
        mod = _jit.import_module(name, path)
    except ImportError as e:
        why = f"ltx_kernels.{name}: the compiled module {path} failed to load ({e})"
        log.debug("%s", why)
        return None, why
    _info[name] = {"origin": "compiled" if meta.get("fresh") else "cache", "path": str(path),
                   "targets": meta.get("targets"), "seconds": meta.get("seconds")}
    log.debug("%s: %s %s (for %s)", name, "compiled now:" if meta.get("fresh") else "not prebuilt; cached build",
              path, ", ".join(cfg.sm(a) for a in meta.get("targets", ())))
    return mod, None


def info(name: str) -> dict | None:
    """How the loaded ``name`` came to be (None before a successful ``load``)."""
    return _info.get(name)


def reasons(name: str, *tensors, arch: tuple | None = None) -> list:
    """Why extension ``name`` cannot run on these tensors (empty: it can). Checks the device before
    loading, so that nothing is compiled for inputs it could not take."""
    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        return [f"tensors on different devices: {sorted(map(str, devs))}"]
    dev = next(iter(devs)) if devs else None
    if dev is None or dev.type != "cuda":
        return ["needs CUDA tensors"]
    cap = torch.cuda.get_device_capability(dev)
    if arch is not None and cap != tuple(arch):
        return [f"ltx_kernels.{name} is for sm_{arch[0]}{arch[1]}, device is sm_{cap[0]}{cap[1]}"]
    mod, why = load(name)
    if mod is None:
        return [why]
    built = (_info.get(name) or {}).get("targets")
    if built and not cfg.runs_on(built, cap):
        return [f"ltx_kernels.{name} was compiled for {', '.join(cfg.sm(a) for a in built)}, "
                f"device is sm_{cap[0]}{cap[1]}"]
    return []


def status(name: str) -> str:
    """One line on ``name`` for ``python -m ltx_kernels``, compiling nothing: a prebuilt or cached
    build is imported, to show that it loads."""
    i = _info.get(name)
    if i is not None:
        return _loaded_line(i)
    mod, pre_why = _prebuilt(name)
    if mod is not None:
        return f"prebuilt by setup.py, loads ({getattr(mod, '__file__', '?')})"
    if not _jit.jit_enabled():
        return f"{pre_why}; compiling on first use is off (LTX_KERNELS_JIT=0)"
    tc = _jit.toolchain()
    if tc.why:
        return f"{pre_why}; cannot be compiled here: {tc.why}"
    found = _jit.builds(name)
    if found:
        folder, meta = found[0]
        what = ", ".join(cfg.sm(a) for a in meta["targets"])
        try:
            _jit.import_module(name, folder / f"{name}.so")
        except ImportError as e:
            return f"compiled earlier for {what}, but fails to load: {e} ({folder})"
        return f"compiled earlier for {what}, loads ({folder})"
    p, why = _jit.plan(name)
    if p is None:
        return f"{pre_why}; cannot be compiled here: {why}"
    return (f"{pre_why}; compiles on first use on a GPU (toolchain above); "
            f"`python -m ltx_kernels build` compiles it now")


def _loaded_line(i: dict) -> str:
    if i["origin"] == "prebuilt":
        return f"prebuilt by setup.py, loads ({i['path']})"
    what = ", ".join(cfg.sm(a) for a in i["targets"] or ())
    if i["origin"] == "compiled":
        return f"compiled now for {what} in {i['seconds']:.0f} s, loads ({i['path']})"
    return f"compiled earlier for {what}, loads ({i['path']})"
