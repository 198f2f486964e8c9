"""Triton kernels, one file per op. Imported lazily by the public wrappers so that
TRITON_INTERPRET can still be set after ``import ltx_kernels``."""
from __future__ import annotations

from .._dispatch import interpreter_on


def prepare() -> None:
    """Called before a kernel module is imported: fixes the interpreter's fp8 casts."""
    if interpreter_on():
        from ._interpreter import patch_interpreter

        patch_interpreter()
