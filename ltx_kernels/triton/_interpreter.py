"""Correct fp8 e4m3 casts for Triton's CPU interpreter.

Triton's interpreter (seen in 3.6 and 3.9) converts fp32 -> float8e4nv with
bit arithmetic that rounds ties away from even, loses the carry into the
exponent (1.97 -> 1.0, -125 -> -64) and wraps past 448 (592 -> 288); its
e4m3 -> fp32 path (casts, and the operands of tl.dot) also decodes NaN (0x7F)
as 480. On sm_90 the same kernel compiles to ``cvt.rn.satfinite.e4m3x2.f32``:
round to nearest even, saturate to +-448, NaN kept; the tensor cores
propagate NaN. This module replaces the interpreter's conversion for e4m3
with one that matches the hardware, so kernels stay written as for the GPU
and the CPU path gives true results. fp32 -> bf16, which the interpreter
truncates, is rounded to nearest even as on the GPU, and bf16 -> fp32 widens
subnormals exactly. Other pairs are untouched.
"""
from __future__ import annotations

import numpy as np
import torch

_PATCHED = False


def _to_f32(data: np.ndarray, tl_dtype, tl) -> np.ndarray:
    if tl_dtype == tl.float32:
        return data.astype(np.float32, copy=False)
    if tl_dtype == tl.float16:
        return data.astype(np.float32)
    if tl_dtype == tl.bfloat16:  # stored as raw uint16 bits
        return (data.astype(np.uint32) << 16).view(np.float32)
    if tl_dtype == tl.float64:
        return data.astype(np.float32)
    raise NotImplementedError


def _from_f32(v: np.ndarray, tl_dtype, tl) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    if tl_dtype == tl.float32:
        return t.numpy()
    if tl_dtype == tl.float16:
        return t.to(torch.float16).numpy()
    if tl_dtype == tl.bfloat16:
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if tl_dtype == tl.float64:
        return t.double().numpy()
    raise NotImplementedError


def fp32_to_e4m3_bits(v: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    return t.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def e4m3_bits_to_fp32(bits: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint8))
    return t.view(torch.float8_e4m3fn).float().numpy()


def patch_interpreter() -> bool:
    """Install the fix once. Returns False when this Triton has no interpreter builder to patch."""
    global _PATCHED
    if _PATCHED:
        return True
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except Exception:
        return False
    builder = getattr(interp, "InterpreterBuilder", None)
    handle_cls = getattr(interp, "TensorHandle", None)
    if builder is None or handle_cls is None or not hasattr(builder, "create_fp_to_fp"):
        return False
    original = builder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        try:
            if dst_ty == tl.float8e4nv and src_ty != tl.float8e4nv:
                bits = fp32_to_e4m3_bits(_to_f32(np.asarray(src.data), src_ty, tl))
                return handle_cls(bits.reshape(np.shape(src.data)), dst_ty)
            if src_ty == tl.float8e4nv and dst_ty != tl.float8e4nv:
                f = e4m3_bits_to_fp32(np.asarray(src.data))
                return handle_cls(_from_f32(f, dst_ty, tl).reshape(np.shape(src.data)), dst_ty)
        except NotImplementedError:
            pass
        return original(self, src, dst_type, rounding_mode)

    builder.create_fp_to_fp = create_fp_to_fp

    # fp32 -> bf16 in the interpreter truncates (no rounding mode is passed); the GPU rounds to
    # nearest even (cvt.rn.bf16.f32). bf16 -> fp32 mis-scales subnormals (-3.49e-39 -> -2.20e-39);
    # on the GPU it is a 16-bit shift. Same fix, same reason (bf16 -> fp16 goes through fp32).
    original_cast = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = _from_f32(np.asarray(src.data), tl.bfloat16, tl)
            return handle_cls(bits.reshape(np.shape(src.data)), dst_type.scalar)
        if src.dtype.scalar == tl.bfloat16 and dst_type.scalar == tl.float32:
            f = _to_f32(np.asarray(src.data), tl.bfloat16, tl)
            return handle_cls(f.reshape(np.shape(src.data)), dst_type.scalar)
        return original_cast(self, src, dst_type)

    builder.cast_impl = cast_impl

    # tl.dot of e4m3 operands decodes them through the same path (NaN codes as +-480, finite
    # results); the tensor cores propagate NaN. Decoded here as the casts above are.
    original_dot = getattr(builder, "create_dot", None)
    if original_dot is not None:
        def create_dot(self, a, b, d, *args, **kwargs):
            if a.dtype.scalar == tl.float8e4nv and b.dtype.scalar == tl.float8e4nv:
                av = e4m3_bits_to_fp32(np.asarray(a.data)).reshape(np.shape(a.data))
                bv = e4m3_bits_to_fp32(np.asarray(b.data)).reshape(np.shape(b.data))
                return handle_cls(np.matmul(av, bv, dtype=d.data.dtype) + d.data, d.dtype.scalar)
            return original_dot(self, a, b, d, *args, **kwargs)

        builder.create_dot = create_dot
    _PATCHED = True
    return True
