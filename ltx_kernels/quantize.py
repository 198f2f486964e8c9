"""Public blockwise-FP8 quantization ops: plain, weights, dequantize and the fused producers.

Activation scales are fp32 logical ``[M, K/128]`` with element (m, kb) at
``m + kb*A4(M)`` (A4 = round up to 4): the layout the GEMMs read. Inside the
torch.library ops they travel as the ``[K/128, A4(M)]`` buffer; the wrappers
return the ``[M, K/128]`` view of it.
"""
from __future__ import annotations

import torch

from . import _checks as chk
from . import reference as ref
from . import tuning
from ._dispatch import Op, Memo, Plans, call, run_planned, torch_reasons, triton_reasons

FP8 = torch.float8_e4m3fn
FP8_SCALE_MAX = ref.FP8_SCALE_MAX
FP6_SCALE_MAX = ref.FP6_SCALE_MAX
MAX_ROW = 32768  # whole-row kernels keep the row in registers

quantize_op = Op("quantize_blockwise")
weights_op = Op("quantize_weights_blockwise")
dequantize_op = Op("dequantize_blockwise")
adanorm_op = Op("quantize_adanorm")
rms_fma_op = Op("quantize_rms_fma")
gated_op = Op("gated_attention")
_checked = Memo()  # argument signatures that passed a wrapper's checks
# Eager fast path (see Plans) of the producers that run before every FP8 linear (quantize_blockwise,
# quantize_adanorm, quantize_rms_fma, gated_attention): the Triton backends offer a plan that
# allocates the outputs and launches directly.
_plans = Plans()


def _prepare_triton():
    from .triton import prepare

    prepare()
    from .triton import quantize as k

    return k


def _as_buffer(scales: torch.Tensor) -> torch.Tensor:
    """[M, KB] aligned-layout scales -> the [KB, A4(M)] buffer (copying into a fresh one)."""
    m, kb = scales.shape
    buf = torch.zeros(kb, ref.align4(m), dtype=torch.float32, device=scales.device)
    buf.t()[:m].copy_(scales)
    return buf


def buffer_to_scales(buf: torch.Tensor, m: int) -> torch.Tensor:
    return buf.t()[:m]


def _offer_plan(launch, inputs, used, view, out_dtype=FP8, scales=True):
    """Offer a plan ``(*inputs) -> (out, scale buffer)`` (what the custom op returns; an empty
    stand-in buffer when not quantizing) for ``launch(*view(*inputs), out rows, sbuf or out rows)``.
    ``inputs`` are the public call's tensors (x first), ``used`` what the kernel read for them;
    offered only when ``view(*inputs)`` gives those very tensors (no copy was needed), as it then
    does for every call of the signature. The public wrappers turn the buffer into the scales
    view (``_with_scales_view``)."""
    if launch is None:
        return
    try:
        again = view(*inputs)
    except RuntimeError:
        return
    if any(a.data_ptr() != b.data_ptr() for a, b in zip(again, used)):
        return
    x = inputs[0]
    shape, device, kk = x.shape, x.device, x.shape[-1]
    m = x.numel() // kk
    kb, m_pad = kk // 128, ref.align4(m)

    def run(*inputs):
        out = torch.empty(shape, dtype=out_dtype, device=device)
        out2 = out.view(-1, kk)
        if not scales:
            launch(*view(*inputs), out2, out2)
            return out, _NO_SCALES(out)
        sbuf = torch.empty(kb, m_pad, dtype=torch.float32, device=device)
        launch(*view(*inputs), out2, sbuf)
        return out, sbuf

    _plans.offer(run)


def _with_scales_view(x, result):
    """An op's or a plan's (q, scale buffer) as the public wrappers return it: (q, scales [M, K/128] view)."""
    q, buf = result
    return q, buffer_to_scales(buf, x.numel() // x.shape[-1])


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.view(-1, t.shape[-1])


def _call_quantized(custom_op, impl, x, *args):
    """call() of an op returning (q, scale buffer), as (q, scales [M, K/128] view)."""
    return _with_scales_view(x, call(custom_op, impl, x, *args))


def _check_eps_scale_max(eps, scale_max) -> None:
    chk.eps(eps)
    chk.scale_max(scale_max)


def _row_reasons(k: int) -> list:
    return [f"row length {k} > {MAX_ROW} (whole-row kernel)"] if k > MAX_ROW else []


# ---------------------------------------------------------------------------------------------
# quantize_blockwise

@quantize_op.register("torch", reasons=lambda x, *a: torch_reasons(x))
def _quantize_torch(x, scale_max, gelu):
    q, s = ref.quantize_blockwise(x, scale_max, gelu)
    return q, _as_buffer(s)


@quantize_op.register("triton", reasons=lambda x, *a: triton_reasons(x, min_arch=(8, 9)))
def _quantize_triton(x, scale_max, gelu):
    k = _prepare_triton()
    kk = x.shape[-1]
    x2 = chk.rows_2d("x", x)
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    sbuf = k.scale_buffer(x2.shape[0], kk // 128, x.device)
    launch = k.quantize(x2, q.view(-1, kk), sbuf, scale_max, gelu)
    _offer_plan(launch, (x,), (x2,), lambda x: (_rows(x),))
    return q, sbuf


def _quantize_op_impl(x: torch.Tensor, scale_max: float, gelu: bool, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_op(backend, x, scale_max, gelu)


def _quantize_registered(x: torch.Tensor, scale_max: float, gelu: bool, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    key = tuning.plan_key("quantize", x, scale_max, bool(gelu), backend=backend)
    return run_planned(_plans, key, (x,), _quantize_op_impl, x, scale_max, gelu, backend)


_quantize_op = torch.library.custom_op("ltx_kernels::quantize_blockwise", _quantize_registered, mutates_args=())


def _fake_quantized(x):
    m = x.numel() // x.shape[-1]
    return x.new_empty(x.shape, dtype=FP8), x.new_empty(x.shape[-1] // 128, ref.align4(m), dtype=torch.float32)


@_quantize_op.register_fake
def _(x, scale_max, gelu, backend):
    return _fake_quantized(x)


def _check_rows(name: str, x) -> int:
    chk.tensor(name, x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    k = x.shape[-1]
    if k == 0 or k % 128:
        raise ValueError(f"{name}'s last dim must be a positive multiple of 128, got {k}")
    return k


def quantize_blockwise(x, *, scale_max=FP8_SCALE_MAX, gelu=False, backend="auto"):
    """1x128 blockwise FP8 quantization along the last dim.

    Returns ``(q, scales)``: q float8_e4m3fn with x's shape, scales fp32 ``[M, K/128]`` in the
    GEMM layout (M-major, padded to 4 rows). ``x ~= q * scale``. ``gelu=True`` applies the tanh
    GELU first (the FFN's activation). All-zero blocks give zero codes and a finite scale.
    """
    scale_max, gelu = chk.real("scale_max", scale_max), chk.flag("gelu", gelu)
    key = tuning.plan_key("quantize", x, scale_max, gelu, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return _with_scales_view(x, plan(x))
    if not _checked.get(key):
        _check_rows("x", x)
        _checked.put(key, chk.scale_max(scale_max))
    return _plans.record(key, _call_quantized, _quantize_op, _quantize_op_impl, x, scale_max, gelu, backend)


# ---------------------------------------------------------------------------------------------
# quantize_weights_blockwise

@weights_op.register("torch", reasons=lambda w, *a: torch_reasons(w))
def _weights_torch(w, scale_max):
    return ref.quantize_weights_blockwise(w, scale_max)


@weights_op.register("triton", reasons=lambda w, *a: triton_reasons(w, min_arch=(8, 9)))
def _weights_triton(w, scale_max):
    k = _prepare_triton()
    n, kk = w.shape
    w2 = w if w.stride(-1) == 1 else w.contiguous()
    q = torch.empty(n, kk, dtype=FP8, device=w.device)
    s = torch.empty(n // 128, kk // 128, dtype=torch.float32, device=w.device)
    k.quantize_weights(w2, q, s, scale_max)
    return q, s


def _weights_op_impl(w: torch.Tensor, scale_max: float, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return weights_op(backend, w, scale_max)


_weights_op = torch.library.custom_op("ltx_kernels::quantize_weights_blockwise", _weights_op_impl, mutates_args=())


@_weights_op.register_fake
def _(w, scale_max, backend):
    n, k = w.shape
    return w.new_empty(n, k, dtype=FP8), w.new_empty(n // 128, k // 128, dtype=torch.float32)


def quantize_weights_blockwise(w, *, scale_max=FP8_SCALE_MAX, backend="auto"):
    """128x128 blockwise quantization of a weight ``[N, K]`` -> ``(q [N, K], scales [N/128, K/128])``.

    The stored scale is ``amax / scale_max`` per block, as LTX-2 checkpoints expect
    (``scale_max=FP6_SCALE_MAX`` makes every code FP6-packable).
    """
    scale_max = check_weights(w, scale_max)
    return call(_weights_op, _weights_op_impl, w, scale_max, backend)


def check_weights(w, scale_max) -> float:
    """A weight ``[N, K]`` of 128x128 blocks and its scale_max (returned as a float)."""
    chk.tensor("w", w, dtypes=chk.FLOAT_DTYPES, ndim=2)
    chk.multiple_of("w.shape[0] (N)", w.shape[0], 128)
    chk.multiple_of("w.shape[1] (K)", w.shape[1], 128)
    return chk.scale_max(scale_max)


# ---------------------------------------------------------------------------------------------
# dequantize_blockwise

@dequantize_op.register("torch", reasons=lambda q, s, *a: torch_reasons(q, s))
def _dequantize_torch(q, scales, out_dtype):
    return ref.dequantize_blockwise(q, scales, out_dtype)


@dequantize_op.register("triton", reasons=lambda q, s, *a: triton_reasons(q, s, min_arch=(8, 9)))
def _dequantize_triton(q, scales, out_dtype):
    k = _prepare_triton()
    q2 = chk.rows_2d("q", q)
    out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    rows_per_scale = 1 if scales.shape[0] == q2.shape[0] else 128
    launch = k.dequantize(q2, scales, out.view(q2.shape), rows_per_scale)
    if launch is not None and q2.data_ptr() == q.data_ptr():  # (no copy of q was needed)
        shape, device, q2shape = q.shape, q.device, q2.shape

        def run(q, scales):
            o = torch.empty(shape, dtype=out_dtype, device=device)
            launch(_rows(q), scales, o.view(q2shape))
            return o

        _plans.offer(run)
    return out


def _dequantize_op_impl(q: torch.Tensor, scales: torch.Tensor, out_dtype: torch.dtype, backend: str) -> torch.Tensor:
    return dequantize_op(backend, q, scales, out_dtype)


def _dequantize_registered(q: torch.Tensor, scales: torch.Tensor, out_dtype: torch.dtype, backend: str) -> torch.Tensor:
    key = tuning.plan_key("dequantize", q, scales, out_dtype, backend=backend)
    return run_planned(_plans, key, (q, scales), _dequantize_op_impl, q, scales, out_dtype, backend)


_dequantize_op = torch.library.custom_op("ltx_kernels::dequantize_blockwise", _dequantize_registered, mutates_args=())


@_dequantize_op.register_fake
def _(q, scales, out_dtype, backend):
    return q.new_empty(q.shape, dtype=out_dtype)


def dequantize_blockwise(q, scales, *, out_dtype=torch.bfloat16, backend="auto"):
    """``q * scale`` for either layout: activation scales ``[M, K/128]`` (any strides) or weight
    scales ``[ceil(M/128), K/128]``; M is the product of q's leading dims."""
    key = tuning.plan_key("dequantize", q, scales, out_dtype, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return plan(q, scales)
    if not _checked.get(key):
        chk.tensor("q", q, dtypes=(FP8,), min_ndim=1)
        chk.tensor("scales", scales, dtypes=(torch.float32,), ndim=2)
        if out_dtype not in chk.FLOAT_DTYPES:
            raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
        chk.same_device(q=q, scales=scales)
        kk = q.shape[-1]
        m = q.shape[:-1].numel()
        kb = (kk + 127) // 128
        if scales.shape[1] != kb or scales.shape[0] not in (m, (m + 127) // 128):
            raise ValueError(f"scales must be [{m}, {kb}] (1x128 blocks) or [{(m + 127) // 128}, {kb}] "
                             f"(128x128 blocks) for q of shape {tuple(q.shape)}, got {tuple(scales.shape)}")
        _checked.put(key)
    return _plans.record(key, call, _dequantize_op, _dequantize_op_impl, q, scales, out_dtype, backend)


# ---------------------------------------------------------------------------------------------
# fused producers

def _check_modulation(name: str, t, x) -> None:
    chk.tensor(name, t, dtypes=chk.FLOAT_DTYPES)
    if not chk.broadcasts_to(t.shape, x.shape) or t.dim() == 0 or t.shape[-1] != x.shape[-1]:
        raise ValueError(f"{name} of shape {tuple(t.shape)} must broadcast to x's shape {tuple(x.shape)} "
                         f"with the same last dim (e.g. [B, 1, h] or [B, T, h])")


@adanorm_op.register("torch", reasons=lambda x, sc, sh, *a: torch_reasons(x, sc, sh))
def _adanorm_torch(x, scale, shift, eps, scale_max):
    q, s = ref.quantize_adanorm(x, scale, shift, eps, scale_max)
    return q, _as_buffer(s)


@adanorm_op.register("triton", reasons=lambda x, sc, sh, *a: triton_reasons(x, sc, sh, min_arch=(8, 9))
                     + _row_reasons(x.shape[-1]))
def _adanorm_triton(x, scale, shift, eps, scale_max):
    k = _prepare_triton()
    kk = x.shape[-1]
    x2 = chk.rows_2d("x", x)
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    sbuf = k.scale_buffer(x2.shape[0], kk // 128, x.device)
    lead = x.shape[:-1]
    sc_map, sh_map = chk.two_level_rows(scale, lead), chk.two_level_rows(shift, lead)
    launch = k.quantize_adanorm(x2, sc_map, sh_map, q.view(-1, kk), sbuf, eps, scale_max)
    _offer_plan(launch, (x, scale, shift), (x2, sc_map[0], sh_map[0]), lambda x, sc, sh: (_rows(x), sc, sh))
    return q, sbuf


def _adanorm_op_impl(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float, scale_max: float,
                backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return adanorm_op(backend, x, scale, shift, eps, scale_max)


def _adanorm_registered(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float, scale_max: float,
                        backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    key = tuning.plan_key("adanorm", x, scale, shift, eps, scale_max, backend=backend)
    return run_planned(_plans, key, (x, scale, shift), _adanorm_op_impl, x, scale, shift, eps, scale_max, backend)


_adanorm_op = torch.library.custom_op("ltx_kernels::quantize_adanorm", _adanorm_registered, mutates_args=())


@_adanorm_op.register_fake
def _(x, scale, shift, eps, scale_max, backend):
    return _fake_quantized(x)


def quantize_adanorm(x, scale, shift, *, eps=1e-6, scale_max=FP8_SCALE_MAX, backend="auto"):
    """``quantize_blockwise(rms_norm(x, eps) * (1 + scale) + shift)`` in one pass, fp32 sums.

    x ``[..., h]``; scale/shift broadcast to x (``[B, 1, h]`` per sample or ``[B, T, h]`` per token).
    """
    eps, scale_max = chk.real("eps", eps), chk.real("scale_max", scale_max)
    key = tuning.plan_key("adanorm", x, scale, shift, eps, scale_max, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return _with_scales_view(x, plan(x, scale, shift))
    if not _checked.get(key):
        _check_rows("x", x)
        _check_modulation("scale", scale, x)
        _check_modulation("shift", shift, x)
        chk.same_device(x=x, scale=scale, shift=shift)
        _check_eps_scale_max(eps, scale_max)
        _checked.put(key)
    return _plans.record(key, _call_quantized, _adanorm_op, _adanorm_op_impl, x, scale, shift, eps, scale_max,
                         backend)


@rms_fma_op.register("torch", reasons=lambda x, y, g, *a: torch_reasons(x, y, g))
def _rms_fma_torch(x, y, gate, eps, scale_max):
    q, s, r = ref.quantize_rms_fma(x, y, gate, eps, scale_max)
    x.copy_(r)
    return q, _as_buffer(s)


@rms_fma_op.register("triton", reasons=lambda x, y, g, *a: triton_reasons(x, y, g, min_arch=(8, 9))
                     + _row_reasons(x.shape[-1]))
def _rms_fma_triton(x, y, gate, eps, scale_max):
    k = _prepare_triton()
    kk = x.shape[-1]
    x2 = chk.rows_2d("x", x)
    in_place = x2.data_ptr() == x.data_ptr() and x2.is_contiguous() == x.is_contiguous()
    if not in_place:
        x2 = x2.clone()
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    sbuf = k.scale_buffer(x2.shape[0], kk // 128, x.device)
    y2, g_map = chk.rows_2d("y", y), chk.two_level_rows(gate, x.shape[:-1])
    launch = k.quantize_rms_fma(x2, y2, g_map, q.view(-1, kk), sbuf, eps, scale_max)
    if not in_place:
        x.copy_(x2.view(x.shape))
    else:
        _offer_plan(launch, (x, y, gate), (x2, y2, g_map[0]), lambda x, y, g: (_rows(x), _rows(y), g))
    return q, sbuf


def _rms_fma_op_impl(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor, eps: float, scale_max: float,
                backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return rms_fma_op(backend, x, y, gate, eps, scale_max)


def _rms_fma_registered(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor, eps: float, scale_max: float,
                        backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    key = tuning.plan_key("rms_fma", x, y, gate, eps, scale_max, True, backend=backend)  # (always in place)
    return run_planned(_plans, key, (x, y, gate), _rms_fma_op_impl, x, y, gate, eps, scale_max, backend)


_rms_fma_op = torch.library.custom_op("ltx_kernels::quantize_rms_fma_", _rms_fma_registered, mutates_args=("x",))


@_rms_fma_op.register_fake
def _(x, y, gate, eps, scale_max, backend):
    return _fake_quantized(x)


def quantize_rms_fma(x, y, gate, *, eps=1e-6, scale_max=FP8_SCALE_MAX, inplace=True, backend="auto"):
    """Residual update then norm+quantize: ``r = x + y*gate`` (rounded to x.dtype),
    ``(q, scales) = quantize_blockwise(rms_norm(r, eps))``.

    With ``inplace=True`` r is written into x (as upstream does); otherwise x is left alone.
    Returns ``(q, scales, r)``. gate broadcasts to x (``[B, 1, h]`` or ``[B, T, h]``).
    """
    eps, scale_max, inplace = chk.real("eps", eps), chk.real("scale_max", scale_max), chk.flag("inplace", inplace)
    key = tuning.plan_key("rms_fma", x, y, gate, eps, scale_max, inplace, backend=backend)
    if inplace:  # (a plan writes the residual into the caller's x)
        plan = _plans.get(key)
        if plan is not None:
            q, s = _with_scales_view(x, plan(x, y, gate))
            return q, s, x
    if not _checked.get(key):
        _check_rows("x", x)
        chk.tensor("y", y, dtypes=chk.FLOAT_DTYPES)
        if y.shape != x.shape:
            raise ValueError(f"y must have x's shape {tuple(x.shape)}, got {tuple(y.shape)}")
        _check_modulation("gate", gate, x)
        chk.same_device(x=x, y=y, gate=gate)
        _check_eps_scale_max(eps, scale_max)
        if inplace and any(st == 0 and n > 1 for n, st in zip(x.shape, x.stride())):
            raise ValueError(f"x is a broadcast view (shape {tuple(x.shape)}, strides {x.stride()}): inplace=True "
                             f"would write every row's residual into the same memory; pass inplace=False")
        _checked.put(key)
    r = x if inplace else x.clone()
    q, s = _plans.record(key if inplace else None, _call_quantized, _rms_fma_op, _rms_fma_op_impl, r, y, gate,
                         eps, scale_max, backend)
    return q, s, r


def _NO_SCALES(x):  # custom ops cannot return None: an empty stand-in when not quantizing
    return x.new_empty(0, dtype=torch.float32)


@gated_op.register("torch", reasons=lambda x, l, *a: torch_reasons(x, l))
def _gated_torch(x, logits, quantize, scale_max):
    out, s = ref.gated_attention(x, logits, quantize, scale_max)
    return out, (_as_buffer(s) if s is not None else _NO_SCALES(x))


@gated_op.register("triton", reasons=lambda x, l, *a: triton_reasons(x, l, min_arch=(8, 9)))
def _gated_triton(x, logits, quantize, scale_max):
    k = _prepare_triton()
    kk = x.shape[-1]
    x2 = chk.rows_2d("x", x)
    l2 = chk.rows_2d("gate_logits", logits)
    out = torch.empty(x.shape, dtype=FP8 if quantize else x.dtype, device=x.device)
    sbuf = k.scale_buffer(x2.shape[0], kk // 128, x.device) if quantize else None
    launch = k.gated_attention(x2, l2, out.view(x2.shape), sbuf, logits.shape[-1], scale_max, quantize)
    _offer_plan(launch, (x, logits), (x2, l2), lambda x, lg: (_rows(x), _rows(lg)), out.dtype, quantize)
    return out, sbuf if quantize else _NO_SCALES(x)


def _gated_op_impl(x: torch.Tensor, gate_logits: torch.Tensor, quantize: bool, scale_max: float,
              backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return gated_op(backend, x, gate_logits, quantize, scale_max)


def _gated_registered(x: torch.Tensor, gate_logits: torch.Tensor, quantize: bool, scale_max: float,
                      backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    key = tuning.plan_key("gated", x, gate_logits, bool(quantize), scale_max, backend=backend)
    return run_planned(_plans, key, (x, gate_logits), _gated_op_impl, x, gate_logits, quantize, scale_max, backend)


_gated_op = torch.library.custom_op("ltx_kernels::gated_attention", _gated_registered, mutates_args=())


@_gated_op.register_fake
def _(x, gate_logits, quantize, scale_max, backend):
    if not quantize:
        return x.new_empty(x.shape), _NO_SCALES(x)
    return _fake_quantized(x)


def gated_attention(x, gate_logits, quantize=True, *, scale_max=FP8_SCALE_MAX, backend="auto"):
    """Per-head output gate ``x * 2*sigmoid(logit)``; x ``[..., H*D]``, gate_logits ``[..., H]``.

    Returns ``(q, scales)`` (blockwise FP8) when ``quantize`` (H*D a multiple of 128), else
    ``(out in x.dtype, None)`` for any H*D.
    """
    quantize, scale_max = chk.flag("quantize", quantize), chk.real("scale_max", scale_max)
    key = tuning.plan_key("gated", x, gate_logits, quantize, scale_max, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return _gated_public(x, plan(x, gate_logits), quantize)
    if not _checked.get(key):
        kk = _check_rows("x", x) if quantize else chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1).shape[-1]
        chk.tensor("gate_logits", gate_logits, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
        nh = gate_logits.shape[-1]
        if gate_logits.shape[:-1] != x.shape[:-1]:
            raise ValueError(f"gate_logits must be x's leading shape {tuple(x.shape[:-1])} + [H], "
                             f"got {tuple(gate_logits.shape)}")
        if nh < 1 or kk % nh:
            raise ValueError(f"the head count H={nh} (gate_logits.shape[-1]) must divide x's last dim {kk}")
        chk.same_device(x=x, gate_logits=gate_logits)
        chk.scale_max(scale_max)
        _checked.put(key)
    return _plans.record(key, _gated_then_view, x, gate_logits, quantize, scale_max, backend)


def _gated_then_view(x, gate_logits, quantize, scale_max, backend):
    return _gated_public(x, call(_gated_op, _gated_op_impl, x, gate_logits, quantize, scale_max, backend), quantize)


def _gated_public(x, result, quantize):
    return _with_scales_view(x, result) if quantize else (result[0], None)
