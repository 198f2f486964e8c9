"""Public fused RMSNorm + RoPE ops: validation, torch.library registration, dispatch."""
from __future__ import annotations

from typing import Optional

import torch

from . import _checks as chk
from . import reference as ref
from . import tuning
from ._dispatch import Op, Memo, Plans, call, run_planned, torch_reasons, triton_reasons
from .triton import next_pow2  # (the kernels' package; Triton itself is imported on first use)

MAX_TRITON_ROW = 32768  # elements per row the Triton kernels keep in registers

interleaved_op = Op("rms_norm_rope")
split_op = Op("rms_norm_split_rope")
_checked = Memo()  # the checks depend on shapes/strides/dtypes/devices only

# Eager fast path (see Plans): the Triton wrappers offer a plan that allocates the output and
# launches the compiled kernel directly (no re-validation, backend choice, row maps or binding).
_plans = Plans()


def _plan(launch, shape, dtype, device, has_w):
    def run(x, cos_freqs, sin_freqs, weights):
        out = torch.empty(shape, dtype=dtype, device=device)
        launch(x, cos_freqs, sin_freqs, weights if has_w else x, out)
        return out

    return run


def _offer_plan(launch, x, x2, maps, freqs, weights, w, out):
    """Offer a plan only when the kernel read the caller's own tensors (no copies were needed)."""
    if launch is None or x2.data_ptr() != x.data_ptr() or (w is not None and w.data_ptr() != weights.data_ptr()):
        return
    if any(m.data_ptr() != f.data_ptr() for m, f in zip(maps, freqs)):
        return
    _plans.offer(_plan(launch, out.shape, out.dtype, out.device, w is not None))


def _out_dtype(x: torch.Tensor, out_fp8: bool) -> torch.dtype:
    return torch.float8_e4m3fn if out_fp8 else x.dtype


def _check_weights(weights, n: int, name="weights"):
    if weights is None:
        return
    chk.tensor(name, weights, dtypes=chk.FLOAT_DTYPES)
    if tuple(weights.shape) != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {tuple(weights.shape)}")


# ---------------------------------------------------------------------------------------------
# interleaved

def _validate_interleaved(x, cos_freqs, sin_freqs, weights, eps):
    chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    d = x.shape[-1]
    if d < 2 or d % 2:
        raise ValueError(f"x's last dim (D) must be even and >= 2 for interleaved pairs, got {d}")
    for name, f in (("cos_freqs", cos_freqs), ("sin_freqs", sin_freqs)):
        chk.tensor(name, f, dtypes=chk.FLOAT_DTYPES)
        if f.dim() == 0 or f.shape[-1] != d:
            raise ValueError(f"{name} must have last dim {d} like x, got shape {tuple(f.shape)}")
        if not chk.broadcasts_to(f.shape, x.shape):
            raise ValueError(f"{name} of shape {tuple(f.shape)} does not broadcast to x's shape {tuple(x.shape)}")
    _check_weights(weights, d)
    chk.same_device(x=x, cos_freqs=cos_freqs, sin_freqs=sin_freqs, weights=weights)
    return chk.eps(eps)


@interleaved_op.register("torch", reasons=lambda x, c, s, w, *a: torch_reasons(x, c, s, w))
def _interleaved_torch(x, cos_freqs, sin_freqs, weights, out_fp8, eps):
    return ref.rms_norm_rope(x, cos_freqs, sin_freqs, weights, out_fp8, eps)


def _triton_min_arch(out_fp8) -> tuple:
    """The Triton kernels need sm_89+ to store e4m3, sm_80+ otherwise."""
    return (8, 9) if out_fp8 else (8, 0)


def _interleaved_triton_reasons(x, c, s, w, out_fp8=False, *_):
    r = triton_reasons(x, c, s, w, min_arch=_triton_min_arch(out_fp8))
    if x.shape[-1] > MAX_TRITON_ROW:
        r.append(f"D={x.shape[-1]} > {MAX_TRITON_ROW} (row must fit in registers)")
    return r


def _split_triton_reasons(x, c, s, w, out_fp8=False, *_):
    """The kernel holds a row as [H, Dh/2] x 2 halves, each dim padded to a power of two."""
    r = triton_reasons(x, c, s, w, min_arch=_triton_min_arch(out_fp8))
    nh = c.shape[1]
    tile = next_pow2(nh) * next_pow2(x.shape[-1] // nh // 2) * 2
    if tile > MAX_TRITON_ROW:
        r.append(f"H*Dh={x.shape[-1]} padded to {tile} (H and Dh/2 each to a power of two) > {MAX_TRITON_ROW} "
                 f"(row must fit in registers)")
    return r


@interleaved_op.register("triton", reasons=_interleaved_triton_reasons)
def _interleaved_triton(x, cos_freqs, sin_freqs, weights, out_fp8, eps):
    from .triton import prepare

    prepare()
    from .triton import rms_norm_rope as k

    d = x.shape[-1]
    x2 = chk.rows_2d("x", x)
    out = torch.empty(x.shape, dtype=_out_dtype(x, out_fp8), device=x.device)
    lead = x.shape[:-1]
    cmap = chk.two_level_rows(cos_freqs, lead)
    smap = chk.two_level_rows(sin_freqs, lead)
    w = weights.contiguous() if weights is not None else None
    launch = k.rms_norm_rope(x2, cmap, smap, w, out.view(-1, d), eps, out_fp8)
    _offer_plan(launch, x, x2, (cmap[0], smap[0]), (cos_freqs, sin_freqs), weights, w, out)
    return out


def _rms_norm_rope_op_impl(x: torch.Tensor, cos_freqs: torch.Tensor, sin_freqs: torch.Tensor,
                      weights: Optional[torch.Tensor], out_fp8: bool, eps: float, backend: str) -> torch.Tensor:
    return interleaved_op(backend, x, cos_freqs, sin_freqs, weights, out_fp8, eps)


def _rms_norm_rope_registered(x: torch.Tensor, cos_freqs: torch.Tensor, sin_freqs: torch.Tensor,
                              weights: Optional[torch.Tensor], out_fp8: bool, eps: float, backend: str) -> torch.Tensor:
    key = tuning.plan_key("interleaved", x, cos_freqs, sin_freqs, weights, eps, bool(out_fp8), backend=backend)
    return run_planned(_plans, key, (x, cos_freqs, sin_freqs, weights), _rms_norm_rope_op_impl, x, cos_freqs, sin_freqs,
                       weights, out_fp8, eps, backend)


_rms_norm_rope_op = torch.library.custom_op("ltx_kernels::rms_norm_rope", _rms_norm_rope_registered, mutates_args=())


@_rms_norm_rope_op.register_fake
def _(x, cos_freqs, sin_freqs, weights, out_fp8, eps, backend):
    return x.new_empty(x.shape, dtype=_out_dtype(x, out_fp8))


def rms_norm_rope(x, cos_freqs, sin_freqs, weights=None, out_fp8=False, *, eps=1e-6, backend="auto"):
    """RMSNorm over the last dim, then RoPE on interleaved pairs (2k, 2k+1).

    ``o[2k] = y[2k]*cos[2k] - y[2k+1]*sin[2k]``, ``o[2k+1] = y[2k+1]*cos[2k+1] + y[2k]*sin[2k+1]``,
    with ``y = x * rsqrt(mean(x^2) + eps) * weights``. x ``[..., D]``; cos/sin broadcastable to x.
    Returns x's dtype, or float8_e4m3fn saturated to +-448 when ``out_fp8``.
    """
    eps, out_fp8 = chk.real("eps", eps), chk.flag("out_fp8", out_fp8)
    key = tuning.plan_key("interleaved", x, cos_freqs, sin_freqs, weights, eps, out_fp8, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return plan(x, cos_freqs, sin_freqs, weights)
    eps = _checked.get(key) or _checked.put(key, _validate_interleaved(x, cos_freqs, sin_freqs, weights, eps))
    return _plans.record(key, call, _rms_norm_rope_op, _rms_norm_rope_op_impl, x, cos_freqs, sin_freqs, weights,
                         out_fp8, eps, backend)


# ---------------------------------------------------------------------------------------------
# split-half

def _validate_split(x, cos_freqs, sin_freqs, weights, eps):
    chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, ndim=3)
    b, t, h = x.shape
    for name, f in (("cos_freqs", cos_freqs), ("sin_freqs", sin_freqs)):
        chk.tensor(name, f, dtypes=chk.FLOAT_DTYPES, ndim=4)
    if cos_freqs.shape != sin_freqs.shape:
        raise ValueError(f"cos_freqs {tuple(cos_freqs.shape)} and sin_freqs {tuple(sin_freqs.shape)} must match")
    bf, nh, tf, half = cos_freqs.shape
    if nh < 1 or h % nh:
        raise ValueError(f"the head count H={nh} (cos_freqs.shape[1]) must divide x's last dim {h}")
    dh = h // nh
    if dh < 2 or dh % 2:
        raise ValueError(f"head dim Dh={dh} (x's last dim {h} / H={nh} from cos_freqs.shape[1]) must be even "
                         f"and >= 2 for split-half RoPE")
    if half != dh // 2 or tf != t or bf not in (1, b):
        raise ValueError(f"cos_freqs/sin_freqs must be [1 or {b}, {nh}, {t}, {dh // 2}] for x {tuple(x.shape)}, "
                         f"got {tuple(cos_freqs.shape)}")
    _check_weights(weights, h)
    chk.same_device(x=x, cos_freqs=cos_freqs, sin_freqs=sin_freqs, weights=weights)
    return chk.eps(eps)


@split_op.register("torch", reasons=lambda x, c, s, w, *a: torch_reasons(x, c, s, w))
def _split_torch(x, cos_freqs, sin_freqs, weights, out_fp8, eps):
    return ref.rms_norm_split_rope(x, cos_freqs, sin_freqs, weights, out_fp8, eps)


def _freq_strides(f: torch.Tensor, b: int):
    sb = f.stride(0) if f.shape[0] == b and b > 1 else 0
    return (sb, f.stride(1), f.stride(2), f.stride(3))


@split_op.register("triton", reasons=_split_triton_reasons)
def _split_triton(x, cos_freqs, sin_freqs, weights, out_fp8, eps):
    from .triton import prepare

    prepare()
    from .triton import rms_norm_rope as k

    b, t, h = x.shape
    nh = cos_freqs.shape[1]
    x2 = chk.rows_2d("x", x)
    out = torch.empty(x.shape, dtype=_out_dtype(x, out_fp8), device=x.device)
    w = weights.contiguous() if weights is not None else None
    launch = k.rms_norm_split_rope(x2, t, nh, cos_freqs, sin_freqs, _freq_strides(cos_freqs, b),
                                   _freq_strides(sin_freqs, b), w, out.view(-1, h), eps, out_fp8)
    _offer_plan(launch, x, x2, (), (), weights, w, out)
    return out


def _rms_norm_split_rope_op_impl(x: torch.Tensor, cos_freqs: torch.Tensor, sin_freqs: torch.Tensor,
                            weights: Optional[torch.Tensor], out_fp8: bool, eps: float,
                            backend: str) -> torch.Tensor:
    return split_op(backend, x, cos_freqs, sin_freqs, weights, out_fp8, eps)


def _rms_norm_split_rope_registered(x: torch.Tensor, cos_freqs: torch.Tensor, sin_freqs: torch.Tensor,
                                    weights: Optional[torch.Tensor], out_fp8: bool, eps: float,
                                    backend: str) -> torch.Tensor:
    key = tuning.plan_key("split", x, cos_freqs, sin_freqs, weights, eps, bool(out_fp8), backend=backend)
    return run_planned(_plans, key, (x, cos_freqs, sin_freqs, weights), _rms_norm_split_rope_op_impl, x, cos_freqs,
                       sin_freqs, weights, out_fp8, eps, backend)


_rms_norm_split_rope_op = torch.library.custom_op("ltx_kernels::rms_norm_split_rope", _rms_norm_split_rope_registered,
                                                  mutates_args=())


@_rms_norm_split_rope_op.register_fake
def _(x, cos_freqs, sin_freqs, weights, out_fp8, eps, backend):
    return x.new_empty(x.shape, dtype=_out_dtype(x, out_fp8))


def rms_norm_split_rope(x, cos_freqs, sin_freqs, weights=None, out_fp8=False, *, eps=1e-6, backend="auto"):
    """RMSNorm over ``H*Dh`` then split-half RoPE per head.

    x ``[B, T, H*Dh]``; cos/sin ``[B or 1, H, T, Dh/2]`` with any strides (the swapaxes view of
    ltx-core is read in place). First half j: ``y_j*cos_j - y_{j+Dh/2}*sin_j``; second half:
    ``y_{j+Dh/2}*cos_j + y_j*sin_j``.
    """
    eps, out_fp8 = chk.real("eps", eps), chk.flag("out_fp8", out_fp8)
    key = tuning.plan_key("split", x, cos_freqs, sin_freqs, weights, eps, out_fp8, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return plan(x, cos_freqs, sin_freqs, weights)
    eps = _checked.get(key) or _checked.put(key, _validate_split(x, cos_freqs, sin_freqs, weights, eps))
    return _plans.record(key, call, _rms_norm_split_rope_op, _rms_norm_split_rope_op_impl, x, cos_freqs, sin_freqs,
                         weights, out_fp8, eps, backend)
