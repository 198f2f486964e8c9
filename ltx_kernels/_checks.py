"""Argument checks shared by the public wrappers: clear ValueError/TypeError messages."""
from __future__ import annotations

import numbers
import operator

import torch

from ._dispatch import Memo

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8 = torch.float8_e4m3fn


def tensor(name: str, t, *, dtypes=None, ndim=None, min_ndim=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        want = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({want}), got {str(t.dtype).replace('torch.', '')}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dims, got shape {tuple(t.shape)}")
    return t


def broadcasts_to(shape, target) -> bool:
    """Whether a tensor of ``shape`` broadcasts to exactly ``target`` (torch.broadcast_shapes costs
    tens of microseconds a call: too slow for a per-call check)."""
    if len(shape) > len(target):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))))


def same_device(**named) -> None:
    items = [(k, v) for k, v in named.items() if isinstance(v, torch.Tensor)]
    if not items:
        return
    dev0 = items[0][1].device
    for k, v in items[1:]:
        if v.device != dev0:
            raise ValueError(f"{k} is on {v.device} but {items[0][0]} is on {dev0}")


def multiple_of(name: str, value: int, m: int) -> None:
    if value % m != 0:
        raise ValueError(f"{name} must be a multiple of {m}, got {value}")


def integer(name: str, value) -> int:
    """An int, also given as another integral type (a numpy integer, a 0-d integer tensor), as
    torch.library's ``int`` arguments take them; never a bool."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def real(name: str, value) -> float:
    """A real number as a float: a Python or numpy int / float, never a bool, a string or a tensor
    (the calls' memos key on the value, and reading a device tensor would wait for the GPU)."""
    if type(value) is float:
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"{name} must be a real number, got {type(value).__name__}")


def flag(name: str, value) -> bool:
    """A bool (also numpy's, or the ints 0 and 1); a string or a tensor is refused, not truth-tested."""
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def eps(value, name: str = "eps") -> float:
    """A norm's eps: finite and > 0 (with 0, an all-zero row would be 0 / 0)."""
    e = real(name, value)
    if not 0.0 < e < float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return e


# What a quantizer's scale_max may be. The smaller it is, the smaller the block absmax whose scale
# amax / scale_max overflows fp32 (at 1e-45, any above 3.4e-7); 2^-9 is e4m3's smallest step. From
# 2^32 on, scale_max / AMAX_FLOOR overflows for an all-zero block (0 * inf codes). Above 448 the
# codes saturate at +-448.
SCALE_MAX_RANGE = (2.0 ** -9, 2.0 ** 16)


def scale_max(value, name: str = "scale_max") -> float:
    v = real(name, value)
    lo, hi = SCALE_MAX_RANGE
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [2**-9, 2**16] (448 for FP8 codes, 0.1172 for FP6-packable "
                         f"ones), got {value!r}")
    return v


def rows_2d(name: str, t: torch.Tensor) -> torch.Tensor:
    """View [..., K] as [M, K] with unit inner stride; copies only when no such view exists."""
    k = t.shape[-1]
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        t = t.contiguous()
    m = t.numel() // k if k else t.shape[:-1].numel()  # (a -1 is ambiguous for zero-width rows)
    try:
        return t.view(m, k)
    except RuntimeError:
        return t.reshape(m, k)


def two_level_rows(t: torch.Tensor, lead_shape) -> tuple[torch.Tensor, int, int, int]:
    """Map a row index r over ``lead_shape`` (after broadcasting ``t`` to it) to an offset.

    Returns (base, inner_count, outer_stride, inner_stride) with
    offset(r) = (r // inner_count) * outer_stride + (r % inner_count) * inner_stride,
    where ``base`` has unit stride on its last dim. The kernels use this to read
    broadcast modulation / frequency tensors without materialising them.
    """
    d = t.shape[-1]
    if t.shape[:-1] == lead_shape and t.is_contiguous():  # the common case, without the general walk
        return t, max(1, t.numel() // d) if d else 1, 0, d
    key = (t.shape, t.stride(), tuple(lead_shape))
    hit = _row_maps.get(key)
    if hit is not None:  # a map that needed no copy: the base pointer is t's own
        return (t,) + hit
    out = _two_level_rows(t, lead_shape, d)
    if out[0].data_ptr() == t.data_ptr():
        _row_maps.put(key, out[1:])
    return out


_row_maps = Memo()


def _two_level_rows(t, lead_shape, d):
    t = t.expand(*lead_shape, d)
    if t.stride(-1) != 1 and d > 1:
        t = t.contiguous()
    sizes = list(t.shape[:-1])
    strides = list(t.stride()[:-1])
    # merge dims that are either size-1 or contiguous with their neighbour
    dims = [(s, st) for s, st in zip(sizes, strides) if s != 1]
    merged: list[list[int]] = []
    for s, st in dims:
        if merged and merged[-1][1] == st * s:
            merged[-1] = [merged[-1][0] * s, st]
        else:
            merged.append([s, st])
    if len(merged) == 0:
        return t, 1, 0, 0
    if len(merged) == 1:
        return t, merged[0][0], 0, merged[0][1]
    if len(merged) == 2:
        return t, merged[1][0], merged[0][1], merged[1][1]
    tc = t.contiguous()
    return tc, int(torch.tensor(sizes).prod().item()) if sizes else 1, 0, d
