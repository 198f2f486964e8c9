"""Public FP6 pack/unpack ops (bit layout of upstream ltx-kernels, see reference.fp6_pack)."""
from __future__ import annotations

import torch

from . import _checks as chk
from . import reference as ref
from . import tuning
from ._dispatch import Memo, Op, Plans, call, run_planned, torch_reasons, triton_reasons

pack_op = Op("fp6_pack")
unpack_op = Op("fp6_unpack")
_checked = Memo()
# Eager fast path (see Plans): the Triton backends offer a plan that allocates the output and
# launches the compiled kernel directly; an FP6 linear unpacks its weight on every forward.
_plans = Plans()


class FP6RangeError(ValueError):
    """fp6_pack(check=True) found values whose dropped exponent bits are not zero."""


def _flat_words(t: torch.Tensor) -> torch.Tensor:
    """Contiguous flat uint8 view whose start is 16-byte aligned (copies only when needed)."""
    flat = t.contiguous().view(torch.uint8).reshape(-1)
    if flat.data_ptr() % 16:
        flat = flat.clone()
    return flat


@pack_op.register("torch", reasons=lambda x: torch_reasons(x))
def _pack_torch(x):
    return ref.fp6_pack(x)


@pack_op.register("triton", reasons=lambda x: triton_reasons(x))
def _pack_triton(x):
    from .triton import prepare

    prepare()
    from .triton import fp6 as k

    out = torch.empty(*x.shape[:-1], x.shape[-1] // 4 * 3, dtype=torch.uint8, device=x.device)
    flat = _flat_words(x)
    _offer_plan(k.fp6_pack(flat, out.view(-1)), x, flat, out.shape)
    return out


@unpack_op.register("torch", reasons=lambda p, n: torch_reasons(p))
def _unpack_torch(p, n):
    return ref.fp6_unpack(p, n)


@unpack_op.register("triton", reasons=lambda p, n: triton_reasons(p))
def _unpack_triton(p, n):
    from .triton import prepare

    prepare()
    from .triton import fp6 as k

    out = torch.empty(*p.shape[:-1], n, dtype=torch.uint8, device=p.device)
    flat = _flat_words(p)
    _offer_plan(k.fp6_unpack(flat, out.view(-1)), p, flat, out.shape)
    return out


def _offer_plan(launch, src, flat, out_shape):
    """A plan ``(src, *rest) -> out`` when the kernel read src's own storage (no copy was made)."""
    if launch is None or flat.data_ptr() != src.data_ptr():
        return
    device = src.device

    def run(src, *rest):
        out = torch.empty(out_shape, dtype=torch.uint8, device=device)
        launch(src.view(torch.uint8).view(-1).view(torch.int32), out.view(-1).view(torch.int32))
        return out

    _plans.offer(run)


def _fp6_pack_op_impl(x: torch.Tensor, backend: str) -> torch.Tensor:
    return pack_op(backend, x)


def _fp6_pack_registered(x: torch.Tensor, backend: str) -> torch.Tensor:
    key = tuning.plan_key("fp6_pack", x, backend=backend)
    return run_planned(_plans, key, (x,), _fp6_pack_op_impl, x, backend)


_fp6_pack_op = torch.library.custom_op("ltx_kernels::fp6_pack", _fp6_pack_registered, mutates_args=())


@_fp6_pack_op.register_fake
def _(x, backend):
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 4 * 3, dtype=torch.uint8)


def _fp6_unpack_op_impl(p: torch.Tensor, n: int, backend: str) -> torch.Tensor:
    return unpack_op(backend, p, n)


def _fp6_unpack_registered(p: torch.Tensor, n: int, backend: str) -> torch.Tensor:
    key = tuning.plan_key("fp6_unpack", p, n, backend=backend)
    return run_planned(_plans, key, (p, n), _fp6_unpack_op_impl, p, n, backend)


_fp6_unpack_op = torch.library.custom_op("ltx_kernels::fp6_unpack", _fp6_unpack_registered, mutates_args=())


@_fp6_unpack_op.register_fake
def _(p, n, backend):
    return p.new_empty(*p.shape[:-1], n, dtype=torch.uint8)


def fp6_check(x: torch.Tensor) -> None:
    """Raise FP6RangeError if any value of x cannot be held in FP6 (|v| > 0.1171875 or NaN).
    x: e4m3 codes, as uint8 or float8_e4m3fn."""
    chk.tensor("x", x, dtypes=(torch.uint8, torch.float8_e4m3fn))
    bad = ref.fp6_bad_values(x)
    if bool(bad.any()):
        count = int(bad.sum())
        first = tuple(int(i) for i in bad.nonzero()[0])
        val = x.view(torch.float8_e4m3fn)[first].float().item()
        raise FP6RangeError(
            f"x holds {count} value(s) FP6 cannot represent (exponent bits 6-5 set, i.e. |v| > 0.1171875 "
            f"or NaN); first at index {first} = {val}. Quantize with scale_max=0.1172 (FP6_SCALE_MAX).")


def fp6_pack(x: torch.Tensor, *, check: bool = False, backend: str = "auto") -> torch.Tensor:
    """Pack e4m3 codes ``[..., n]`` (uint8 or float8_e4m3fn, n % 4 == 0) into uint8 ``[..., 3n/4]``.

    Keeps bits 7 and 4..0 of each byte (bits 6-5 must be zero), 4 codes -> 3 bytes MSB-first,
    bit-exact with upstream. ``check=True`` raises FP6RangeError instead of dropping set bits.
    """
    check = chk.flag("check", check)
    key = tuning.plan_key("fp6_pack", x, backend=backend)
    if not _checked.get(key):
        chk.tensor("x", x, dtypes=(torch.uint8, torch.float8_e4m3fn), min_ndim=1)
        chk.multiple_of("x.shape[-1]", x.shape[-1], 4)
        _checked.put(key)
    if check:
        fp6_check(x)
    plan = _plans.get(key)
    if plan is not None:
        return plan(x)
    return _plans.record(key, call, _fp6_pack_op, _fp6_pack_op_impl, x, backend)


def fp6_unpack(p: torch.Tensor, n: int, *, backend: str = "auto") -> torch.Tensor:
    """Inverse of fp6_pack: uint8 ``[..., 3n/4]`` -> uint8 ``[..., n]`` (view it as float8_e4m3fn)."""
    if type(n) is not int:
        n = chk.integer("n", n)
    key = tuning.plan_key("fp6_unpack", p, n, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return plan(p, n)
    if not _checked.get(key):
        chk.tensor("p", p, dtypes=(torch.uint8,), min_ndim=1)
        if n < 0:
            raise ValueError(f"n (the codes per row) must be >= 0, got {n}")
        chk.multiple_of("n", n, 4)
        if p.shape[-1] != n // 4 * 3:
            raise ValueError(f"p's last dim must be 3*n/4 = {n // 4 * 3} for n={n}, got {p.shape[-1]}")
        _checked.put(key)
    return _plans.record(key, call, _fp6_unpack_op, _fp6_unpack_op_impl, p, n, backend)
