"""Upstream-compatible names of ``ltx_kernels.blockwise.linear`` over this package's GEMM."""
from __future__ import annotations

import torch

from .. import linear as _lin
from ..gemm import fp8_gemm_nt
from ..linear import BlockwiseFP6Linear, BlockwiseFP8Linear  # noqa: F401

BlockwiseLinear = BlockwiseFP8Linear  # upstream's base name for the FP8 layer


def blockwise_fp8_gemm(a, b, bias=None, use_fast_accum=True):
    """``blockwise_fp8_gemm((a, a_scales), (b, b_scales), bias)`` -> bf16 ``[M, N]``.

    ``use_fast_accum`` is accepted for compatibility and ignored: the accumulation is always
    fp32, promoted every 128-K block (upstream's sm89 fp16 fast accumulation can overflow)."""
    (qa, sa), (qb, sb) = a, b
    return fp8_gemm_nt(qa, sa, qb, sb, bias)


def get_fp8_gemm_nt():
    """The GEMM entry upstream picked per architecture; here the dispatcher picks at each call."""
    return fp8_gemm_nt


def blockwise_linear_func(x, weight, weight_scale, bias=None):
    """Functional form of the layers' forward: x a float tensor or a ``(q, scales)`` pair."""
    return _lin.linear_forward(x, weight, weight_scale, bias)


class BlockwiseGemmLinearFunc(torch.autograd.Function):
    """Forward-only, as upstream (inference): ``apply(x, weight, weight_scale, bias)``."""

    @staticmethod
    def forward(ctx, x, weight, weight_scale, bias=None):
        return _lin.linear_forward(x, weight, weight_scale, bias)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("blockwise FP8 linears are inference-only (no backward), as upstream")
