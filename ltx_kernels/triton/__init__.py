"""Triton kernels, one file per op. Imported lazily by the public wrappers so that
TRITON_INTERPRET can still be set after ``import ltx_kernels``."""
from __future__ import annotations

import torch

from .._dispatch import interpreter_on


_patched = False


def prepare() -> None:
    """Called before a kernel module is imported: fixes the interpreter's fp8 casts."""
    global _patched
    if not _patched and interpreter_on():
        from ._interpreter import patch_interpreter

        patch_interpreter()
        _patched = True


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (triton.cdiv is a JIT function: slow to call from Python)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def direct_launcher(compiled, grid, args, n_dynamic: int):
    """``launch(*tensors)`` for a kernel Triton has compiled (what ``kernel[grid](*args)``
    returned), skipping ``JITFunction.run``'s binding and cache lookup on later calls; None when
    it does not apply (interpreter, launch hooks installed, an unknown Triton API).

    ``args`` are all the kernel's parameters in signature order, constexprs included, as Triton
    3.4-3.9 pass them to ``CompiledKernel.run``; the first ``n_dynamic`` (the tensors) are given
    per launch, the rest stay fixed; each launch goes to the current stream of the first tensor's
    device (the device is part of the signature), with that device made current. The caller must
    only reuse it for arguments that Triton would specialize identically (same dtypes, constexprs,
    16-byte alignment of pointers, and integers equal to 1 / divisible by 16 in the same places):
    the per-signature plans of the wrappers key on exactly the shapes, strides, dtypes and pointer
    alignments that decide these; the first launch must have run on that device (``Op`` calls do).
    """
    # A tensor among the fixed arguments would be the first call's in every later launch.
    stray = [i for i, a in enumerate(args) if i >= n_dynamic and isinstance(a, torch.Tensor)]
    if stray:
        raise ValueError(f"direct_launcher: arguments {stray} are tensors but n_dynamic={n_dynamic}")
    if compiled is None or interpreter_on():
        return None
    try:
        from triton import knobs

        # Triton >= 3.6 keeps the hooks as (normally empty) HookChains, older ones as None or a
        # callable; a profiler attached later does not see planned launches.
        if any(h is not None and getattr(h, "calls", True)
               for h in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)):
            return None
        run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    except Exception:  # another Triton's internals: keep the regular launch path
        return None
    g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
    fixed = tuple(args[n_dynamic:])
    stream, current, index = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice, args[0].device.index

    def launch(*dynamic):
        if current() != index:
            # the compiled function belongs to its device's context, and Triton's launcher (with its
            # scratch allocations) works in the current one
            with torch.cuda.device(index):
                return launch(*dynamic)
        run(g0, g1, g2, stream(index), function, meta, None, None, None, *dynamic, *fixed)

    return launch
