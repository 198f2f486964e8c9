"""Triton kernels, one file per op. Imported lazily by the public wrappers so that
TRITON_INTERPRET can still be set after ``import ltx_kernels``."""
from __future__ import annotations

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
