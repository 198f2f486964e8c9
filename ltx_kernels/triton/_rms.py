"""Row RMS shared by the norm kernels, safe for rows whose sum of squares overflows fp32.

x*x overflows from |x| ~ 1.8e19 (a long row's sum from ~1e17); rsqrt(inf) = 0 would then turn
every value of the row into 0. Such a row is scaled by 2^-80 (exact: a power of two) and
normalised without eps, which is negligible next to its mean square; the torch reference does the
same (``reference.rms_norm``). Only a program holding an overflowed row takes the branch, so the
usual path costs one max over the program's row sums and a uniform branch, not a second pass
over the row.
"""
from __future__ import annotations

import triton
import triton.language as tl

FLT_MAX = tl.constexpr(3.4028234663852886e38)
RESCALE = tl.constexpr(2.0 ** -80)  # reference.OVERFLOW_RESCALE


@triton.jit
def rms_rows(x, n, eps):
    """x fp32 [R, C] (zeros where masked), n the row length -> (x', inv) with x' * inv[:, None]
    the normalised rows: x' is x, or x * 2^-80 for rows whose sum of squares overflowed."""
    ss = tl.sum(x * x, axis=1)
    e = tl.zeros_like(ss) + eps
    if tl.max(ss, axis=0) > FLT_MAX:
        big = ss > FLT_MAX
        x = x * tl.where(big, RESCALE, 1.0)[:, None]
        ss = tl.sum(x * x, axis=1)
        e = tl.where(big, 0.0, e)
    return x, tl.math.rsqrt(ss / n + e)
