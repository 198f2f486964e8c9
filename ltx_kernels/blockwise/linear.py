"""``ltx_kernels.blockwise.linear``: upstream's layer classes, GEMM entry points and argument
structures over this package's GEMM (the SM90 kernel on Hopper, Triton elsewhere, chosen per call).

Operands travel as upstream's pairs: ``a = (codes, scales)`` with activation scales
``[M, K/128]`` (or ``(x, None)`` for a float x, quantized here), ``b = (weight codes [N, K],
weight scales [N/128, K/128])``.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from .. import linear as _lin
from ..arch import get_device_arch  # noqa: F401  (upstream's module exposes it)
from ..gemm import fp8_gemm_nt
from ..linear import BlockwiseFP6Linear, BlockwiseFP8Linear, BlockwiseLinear  # noqa: F401
from .functional import _as_pair
from .functional import (  # noqa: F401  (upstream's module exposes these)
    blockwise_quantize_triton,
    blockwise_quantize_weights,
    fp6_blockwise_quantize_weights_torch,
    fp6_pack,
    fp6_unpack,
)

FP8 = torch.float8_e4m3fn


def _gemm_into(a, b, d, bias=None, c=None, num_sms=132, use_fast_accum=True):
    (qa, sa), (qb, sb) = _as_pair("a", a), _as_pair("b", b)
    if c is not None:
        raise ValueError("c (an accumulator input) is not supported: pass None")
    return fp8_gemm_nt(qa, sa, qb, sb, bias, out=d)


def get_fp8_gemm_nt():
    """The GEMM callable ``f(a, b, d, bias=None, c=None, num_sms=132, use_fast_accum=True)``
    writing ``a @ b^T (+ bias)`` into the bf16 ``d [M, N]``.

    Upstream returned an architecture-specific kernel here; this package's dispatcher picks per
    call (``num_sms`` is read from the device, ``use_fast_accum`` is ignored: accumulation is
    always fp32, promoted every 128-K block)."""
    return _gemm_into


def blockwise_fp8_gemm(a: List[torch.Tensor], b: List[torch.Tensor], bias: Optional[torch.Tensor] = None,
                       use_fast_accum: bool = True) -> torch.Tensor:
    """``a = (qa [M, K], sa [M, K/128])``, ``b = (qb [N, K], sb [N/128, K/128])`` -> bf16 ``[M, N]``.
    ``use_fast_accum`` is accepted and ignored (fp32 accumulation always)."""
    (qa, sa), (qb, sb) = _as_pair("a", a), _as_pair("b", b)
    return fp8_gemm_nt(qa, sa, qb, sb, bias)


def blockwise_fp8_gemm_fake(a: List[torch.Tensor], b: List[torch.Tensor], bias: Optional[torch.Tensor] = None,
                            use_fast_accum: bool = True) -> torch.Tensor:
    """The output's shape, dtype and device without computing it."""
    (qa, _), (qb, _) = _as_pair("a", a), _as_pair("b", b)
    return torch.empty(qa.shape[0], qb.shape[0], dtype=torch.bfloat16, device=qb.device)


def is_16bit(x) -> bool:
    return x.dtype in (torch.float16, torch.bfloat16)


def _linear(a, w, bias):
    x, scales = _as_pair("a", a)
    wq, ws = _as_pair("w", w)
    return _lin.linear_forward(x if scales is None else (x, scales), wq, ws, bias)


class BlockwiseGemmLinearFunc(torch.autograd.Function):
    """``BlockwiseGemmLinearFunc.apply(a, w, bias)`` with ``a = (x, None)`` or ``(codes, scales)``
    and ``w = (weight codes, weight scales)``; returns bf16 ``[..., N]``. Forward only (inference),
    as upstream."""

    @staticmethod
    def forward(ctx, a, w, bias):
        return _linear(a, w, bias)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("blockwise FP8 linears are inference-only (no backward), as upstream")


def blockwise_linear_func(a, b, bias=None):
    """``BlockwiseGemmLinearFunc.apply(a, b, bias)``."""
    return BlockwiseGemmLinearFunc.apply(a, b, bias)
