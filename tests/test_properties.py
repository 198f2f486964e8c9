"""Property tests: every public op on random shapes (0, 1, odd, non-power-of-two sizes, many rows),
memory layouts (sliced rows, transposed and offset views, broadcast and expanded frequencies and
modulation), dtypes and values (zeros, subnormals, +-448 and past it, 1e6, huge, NaN, Inf), each
backend against the independent float64 oracles of ``oracle.py``; invalid input must raise a
ValueError / TypeError that names the argument.

Example counts come from the hypothesis profile chosen by ``LTX_KERNELS_HYPOTHESIS_PROFILE``
(``conftest.py``): ``ci`` (default; fixed seed, sized for CI's CPU interpreter) or ``gpu`` (five
times the examples, a fresh seed each run: pass ``--hypothesis-seed=N`` to repeat one). On a GPU
the same tests run on CUDA tensors for the Triton and CUDA backends.
"""
from __future__ import annotations

import math
import os
import re
import tempfile

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ltx_kernels as lk  # noqa: E402
from ltx_kernels import _ext  # noqa: E402

import oracle as O  # noqa: E402
from conftest import DEVICE  # noqa: E402
from helpers import run_local_checked  # noqa: E402

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
FLOATS = [BF16, torch.float16, torch.float32]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy overflow in the interpreter


def budget(n: int):
    """n examples under the ci profile, scaled like the loaded profile's max_examples (ci 10)."""
    return settings(max_examples=max(1, round(n * settings().max_examples / 10)))


def _backends(*extra):
    out = ["torch", "triton"]
    return out + [b for b in extra if DEVICE.type == "cuda"]


# ---------------------------------------------------------------------------------------------
# Values and layouts

KINDS = ("normal", "wide", "tiny", "huge", "zeros", "fp8")
FINITE_SPECIALS = (0.0, -0.0, 1e-40, -3e-42, 448.0, -448.0, 449.0, 464.0, -480.0, 1e6, -1e6, 3e38, -3e38, 65504.0)
NONFINITE = (math.nan, math.inf, -math.inf)
FP8_EDGES = (448.0, -448.0, 449.0, 464.0, 480.0, -1e6, 2.0 ** -9, -(2.0 ** -10), 0.1171875, 2.0 ** -6, 1.9375)


def recipes(nonfinite=True, kinds=KINDS, max_specials=3, bound=math.inf):
    """How to fill a tensor (see ``make``); specials of magnitude <= bound."""
    specials = tuple(v for v in FINITE_SPECIALS if abs(v) <= bound) + (NONFINITE if nonfinite else ())
    return st.tuples(st.sampled_from(kinds), st.integers(-3, 3), st.integers(0, 2 ** 31 - 1),
                     st.lists(st.tuples(st.sampled_from(specials), st.integers(1, 3)), max_size=max_specials))


def make(shape, dtype, recipe, device=DEVICE, limit=None):
    """Values of ``dtype`` (on ``device``, contiguous) from a recipe: a kind, a power of ten, a
    seed, and special values placed at random positions. ``limit`` bounds the magnitude of the
    random part (not of the specials)."""
    kind, p, seed, specials = recipe
    g = torch.Generator().manual_seed(seed)
    fmax = torch.finfo(dtype).max
    n = math.prod(shape)
    r = torch.randn(n, generator=g, dtype=torch.float64)
    if kind == "normal":
        v = r * 10.0 ** p
    elif kind == "wide":  # magnitudes spread log-uniformly over 2^-60 .. 2^60
        v = r.sign() * torch.exp2(torch.rand(n, generator=g, dtype=torch.float64) * 120 - 60)
    elif kind == "tiny":  # subnormals of the dtype and just above
        v = r * torch.finfo(dtype).tiny
    elif kind == "huge":
        v = r.clamp(-1, 1) * fmax * 0.9
    elif kind == "zeros":
        v = torch.zeros(n, dtype=torch.float64)
    else:
        edges = torch.tensor(FP8_EDGES, dtype=torch.float64)
        v = edges[torch.randint(0, len(FP8_EDGES), (n,), generator=g)] * 10.0 ** min(p, 0)
    if limit is not None:
        v = v.clamp(-limit, limit)
    v = v.clamp(-fmax, fmax)
    for value, count in specials:
        if n == 0:
            break
        if math.isfinite(value):
            value = max(-fmax, min(fmax, value))
        v[torch.randint(0, n, (count,), generator=g)] = value
    return v.to(dtype).view(shape).to(device)


LAYOUTS = ("contiguous", "sliced", "transposed", "offset")


def relayout(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in another memory layout: rows sliced from wider ones, a transposed buffer,
    or a base one element past an aligned allocation."""
    if how == "contiguous" or t.dim() == 0:
        return t.contiguous()
    if how == "sliced":
        buf = torch.zeros(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype, device=t.device)
        buf[..., : t.shape[-1]] = t
        return buf[..., : t.shape[-1]]
    if how == "transposed" and t.dim() >= 2:
        buf = torch.empty(*t.shape[:-2], t.shape[-1], t.shape[-2], dtype=t.dtype, device=t.device)
        buf.copy_(t.transpose(-1, -2))
        return buf.transpose(-1, -2)
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = flat[1:].view(t.shape)
    out.copy_(t)
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    # (reshape first: an empty view keeps its strides through contiguous(), which view() refuses)
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def lead_shapes(max_rows=300, max_dims=3):
    """Leading dims with a bounded product: empty, 0, 1, odd and non-power-of-two sizes; now and
    then many rows in one dim."""
    few = st.lists(st.sampled_from([0, 1, 1, 2, 3, 5, 7, 12, 33]), max_size=max_dims)
    many = st.tuples(st.just(1), st.integers(min(100, max_rows), max_rows))
    return st.one_of(few, few, few, many.map(list)).filter(lambda s: math.prod(s) <= max_rows)


def bcast_shape(draw, lead, width):
    """A shape broadcasting to lead + [width]: some leading dims kept, others 1, maybe fewer dims."""
    keep = [draw(st.booleans()) for _ in lead]
    shape = [d if k else 1 for d, k in zip(lead, keep)]
    drop = draw(st.integers(0, len(shape)))
    return shape[drop:] + [width]


def bcast_tensor(draw, lead, width, dtype, recipe, limit=None):
    """A tensor broadcasting to lead + [width]: a smaller one, or an expanded (stride 0) view."""
    shape = bcast_shape(draw, lead, width)
    t = make(shape, dtype, recipe, limit=limit)
    if draw(st.booleans()) and len(shape) == len(lead) + 1:
        t = t.expand(*lead, width)
    elif draw(st.booleans()):
        t = relayout(t, draw(st.sampled_from(("sliced", "offset"))))
    return t


EPS = st.sampled_from([1e-6, 1e-5, 1e-12, 0.1])
SCALE_MAX = st.sampled_from([448.0, lk.FP6_SCALE_MAX, 1.0, 240.0, 1000.0])
UNIT = recipes(nonfinite=False, kinds=("normal",), bound=1.0)  # cos / sin: within [-1, 1]


# ---------------------------------------------------------------------------------------------
# RMSNorm + RoPE

@pytest.mark.parametrize("backend", _backends())
@budget(80)
@given(data=st.data())
def test_rms_norm_rope(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=200))
    d = 2 * draw(st.one_of(st.integers(1, 70), st.sampled_from([64, 257, 1024])))
    dt, ft = draw(st.sampled_from(FLOATS)), draw(st.sampled_from(FLOATS))
    x = relayout(make(lead + [d], dt, draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    c = bcast_tensor(draw, lead, d, ft, draw(UNIT), limit=1.0)
    s = bcast_tensor(draw, lead, d, ft, draw(UNIT), limit=1.0)
    # (weights up to 1e6: y * w * cos, y <= sqrt(D), stays inside fp32, where the kernels work)
    w = make([d], draw(st.sampled_from(FLOATS)), draw(recipes(nonfinite=False, bound=1e6)),
             limit=1e3) if draw(st.booleans()) else None
    out_fp8, eps = draw(st.booleans()), draw(EPS)
    x0 = x.clone()
    out = lk.rms_norm_rope(x, c, s, w, out_fp8, eps=eps, backend=backend)
    assert out.dtype == (FP8 if out_fp8 else dt) and out.shape == x.shape and out.device == x.device
    O.assert_rounded(out, O.rms_norm_rope(x, c, s, w, eps))
    assert same_bits(x, x0), "x was modified"


@st.composite
def split_freqs(draw, b, t, nh, dh, dtype):
    """cos or sin [B or 1, H, T, Dh/2]: contiguous, ltx-core's swapaxes view of [B, T, H, Dh/2],
    rows sliced from wider ones, or one sample expanded over B (stride 0)."""
    bf = draw(st.sampled_from([1, b]))
    how = draw(st.sampled_from(["contiguous", "swapaxes", "sliced", "expanded"]))
    rec = draw(UNIT)
    if how == "swapaxes":
        return make([bf, t, nh, dh // 2], dtype, rec, limit=1.0).swapaxes(1, 2)
    if how == "expanded":
        return make([1, nh, t, dh // 2], dtype, rec, limit=1.0).expand(b, nh, t, dh // 2)
    f = make([bf, nh, t, dh // 2], dtype, rec, limit=1.0)
    return relayout(f, "sliced") if how == "sliced" else f


@pytest.mark.parametrize("backend", _backends())
@budget(80)
@given(data=st.data())
def test_rms_norm_split_rope(backend, data):
    draw = data.draw
    b, t = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([0, 1, 2, 5, 9, 31, 150]))
    nh = draw(st.sampled_from([1, 2, 3, 5, 8]))
    dh = 2 * draw(st.sampled_from([1, 3, 16, 32, 48, 64]))
    dt, ft = draw(st.sampled_from(FLOATS)), draw(st.sampled_from(FLOATS))
    x = relayout(make([b, t, nh * dh], dt, draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    c, s = draw(split_freqs(b, t, nh, dh, ft)), draw(split_freqs(b, t, nh, dh, ft))
    if c.shape != s.shape:  # (both must be [B or 1, ...] alike)
        s = s.expand(c.shape) if s.shape[0] == 1 else s[:1]
    w = make([nh * dh], draw(st.sampled_from(FLOATS)), draw(recipes(nonfinite=False, bound=1e6)),
             limit=1e3) if draw(st.booleans()) else None
    out_fp8, eps = draw(st.booleans()), draw(EPS)
    out = lk.rms_norm_split_rope(x, c, s, w, out_fp8, eps=eps, backend=backend)
    assert out.dtype == (FP8 if out_fp8 else dt) and out.shape == x.shape
    O.assert_rounded(out, O.rms_norm_split_rope(x, c, s, w, eps))


# ---------------------------------------------------------------------------------------------
# FP6

@pytest.mark.parametrize("backend", _backends())
@budget(120)
@given(data=st.data())
def test_fp6_pack_unpack(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=400))
    n = 4 * draw(st.one_of(st.integers(0, 40), st.sampled_from([256, 1025])))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    raw = torch.randint(0, 256, lead + [n], generator=g, dtype=torch.uint8)
    fits = draw(st.booleans())
    if fits:
        raw &= 0x9F  # bits 6-5 clear: every code holds in FP6
    x = relayout(raw.to(DEVICE), draw(st.sampled_from(LAYOUTS)))
    if draw(st.booleans()):
        x = x.view(FP8)
    p = lk.fp6_pack(x, backend=backend)
    want = O.fp6_pack(raw)
    assert p.dtype == torch.uint8 and p.device == x.device and torch.equal(p.cpu(), want)
    if not bool((raw & 0x60).any()):
        lk.fp6_pack(x, check=True, backend=backend)
    else:
        with pytest.raises(lk.FP6RangeError, match="FP6 cannot represent"):
            lk.fp6_pack(x, check=True, backend=backend)
    pv = relayout(p, draw(st.sampled_from(LAYOUTS)))
    u = lk.fp6_unpack(pv, n, backend=backend)
    assert u.dtype == torch.uint8 and torch.equal(u.cpu(), O.fp6_unpack(want, n))
    assert torch.equal(u.cpu(), raw & 0x9F)


# ---------------------------------------------------------------------------------------------
# Blockwise quantization

def _assert_scale_layout(s, m, kb):
    a4 = (m + 3) // 4 * 4
    assert s.shape == (m, kb) and s.dtype == torch.float32
    if m > 1 and kb > 1:
        assert s.stride() == (1, a4), f"scales strides {s.stride()}, want (1, {a4}): the GEMM layout"


@pytest.mark.parametrize("backend", _backends())
@budget(100)
@given(data=st.data())
def test_quantize_blockwise(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=300))
    k = 128 * draw(st.sampled_from([1, 2, 3, 5, 8]))
    dt = draw(st.sampled_from(FLOATS))
    x = relayout(make(lead + [k], dt, draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    gelu, smax = draw(st.booleans()), draw(SCALE_MAX)
    q, s = lk.quantize_blockwise(x, scale_max=smax, gelu=gelu, backend=backend)
    m = math.prod(lead)
    assert q.shape == x.shape and q.dtype == FP8
    _assert_scale_layout(s, m, k // 128)
    if not gelu:  # bit-exact: one fp32 division per block and one fp32 product per element
        wq, ws = O.quantize_blockwise(x, smax)
        O.assert_same_codes(q, wq)
        O.assert_equal_values(s, ws, "scales")
    else:
        xv = O.f64(x)
        u = O.Noisy(O.gelu_tanh(xv), O.GELU_NOISE * (xv.abs() + 1).nan_to_num(0.0, posinf=0.0))
        O.assert_quantized(q, s, u, smax, "gelu")


@pytest.mark.parametrize("backend", _backends())
@budget(40)
@given(data=st.data())
def test_quantize_weights_blockwise(backend, data):
    draw = data.draw
    n, k = 128 * draw(st.integers(1, 3)), 128 * draw(st.integers(1, 3))
    w = relayout(make([n, k], draw(st.sampled_from(FLOATS)), draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    smax = draw(SCALE_MAX)
    q, s = lk.quantize_weights_blockwise(w, scale_max=smax, backend=backend)
    wq, ws = O.quantize_weights_blockwise(w, smax)
    O.assert_same_codes(q, wq)
    assert s.shape == (n // 128, k // 128) and s.is_contiguous()
    O.assert_equal_values(s, ws, "scales")


@st.composite
def fp8_codes(draw, shape, nan=True):
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    b = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    if not nan:
        b = torch.where((b & 0x7F) == 0x7F, b & 0xF0, b)  # no NaN codes
    return b.view(FP8)


def _positive_scales(draw, shape):
    kind = draw(st.sampled_from(["range", "range", "zeros", "tiny", "huge"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    v = torch.exp2(torch.rand(shape, generator=g, dtype=torch.float64) * 40 - 20)
    if kind == "zeros":
        v = v * (torch.rand(shape, generator=g) < 0.5)
    elif kind == "tiny":
        v = v * 2.0 ** -100
    elif kind == "huge":
        v = v * 2.0 ** 70
    return v.float()


@pytest.mark.parametrize("backend", _backends())
@budget(100)
@given(data=st.data())
def test_dequantize_blockwise(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=300))
    k = draw(st.one_of(st.sampled_from([0, 128, 256, 384]), st.integers(1, 400)))
    q = relayout(draw(fp8_codes(lead + [k])).to(DEVICE), draw(st.sampled_from(LAYOUTS)))
    m, kb = math.prod(lead), (k + 127) // 128
    rows = draw(st.sampled_from([m, (m + 127) // 128]))
    how = draw(st.sampled_from(["contiguous", "m_major", "sliced", "offset"]))
    sv = _positive_scales(draw, (rows, kb)).to(DEVICE)
    if how == "m_major":  # the layout quantize_blockwise writes
        scales = torch.zeros(kb, (rows + 3) // 4 * 4, device=DEVICE).t()[:rows]
        scales.copy_(sv)
    else:
        scales = relayout(sv, how)
    out_dtype = draw(st.sampled_from(FLOATS))
    out = lk.dequantize_blockwise(q, scales, out_dtype=out_dtype, backend=backend)
    assert out.dtype == out_dtype and out.shape == q.shape
    O.assert_equal_values(out, O.dequantize(q, scales, out_dtype), "dequantized")


# ---------------------------------------------------------------------------------------------
# Fused producers

ADANORM_VARIANTS = (None, {"BLOCK_M": 2, "num_warps": 4}, {"KIND": "bcast", "ROWS": 4, "BLOCK_M": 2, "num_warps": 4},
                    {"KIND": "twopass", "BLOCK_M": 2, "CHUNK_KB": 1, "num_warps": 4})


def _adanorm_direct(x, scale, shift, eps, smax, cfg):
    """The Triton launcher with an explicit kernel variant (what the warmup tunes between)."""
    from ltx_kernels import _checks as chk
    from ltx_kernels.triton import prepare

    prepare()
    from ltx_kernels.triton import quantize as kq

    k = x.shape[-1]
    m = x.numel() // k
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    sbuf = kq.scale_buffer(m, k // 128, x.device)
    kq.quantize_adanorm(chk.rows_2d("x", x), chk.two_level_rows(scale, x.shape[:-1]),
                        chk.two_level_rows(shift, x.shape[:-1]), q.view(m, k), sbuf, eps, smax, cfg=cfg)
    return q, sbuf.t()[:m]


@pytest.mark.parametrize("backend", _backends())
@budget(100)
@given(data=st.data())
def test_quantize_adanorm(backend, data):
    draw = data.draw
    b, t = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([0, 1, 2, 7, 40, 129]))
    k = 128 * draw(st.sampled_from([1, 2, 3, 6]))
    x = relayout(make([b, t, k], draw(st.sampled_from(FLOATS)), draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    per_token = draw(st.booleans())
    mt = draw(st.sampled_from(FLOATS))
    mod_lead = [b, t] if per_token else [b, 1]
    # (modulation up to 1e30: u stays clear of fp32's overflow, where an exact oracle cannot say
    # whether the fp32 value rounded to the largest float or to inf)
    scale = bcast_tensor(draw, mod_lead, k, mt, draw(recipes(max_specials=1, bound=1e30)), limit=3.0)
    shift = bcast_tensor(draw, mod_lead, k, mt, draw(recipes(max_specials=1, bound=1e30)), limit=3.0)
    eps, smax = draw(EPS), draw(SCALE_MAX)
    cfg = draw(st.sampled_from(ADANORM_VARIANTS)) if backend == "triton" else None
    try:
        q, s = (lk.quantize_adanorm(x, scale, shift, eps=eps, scale_max=smax, backend=backend) if cfg is None
                else _adanorm_direct(x, scale, shift, eps, smax, cfg))
    except ValueError as e:  # the shared-modulation kernel refuses modulation that varies per token
        assert cfg is not None and "shared-modulation" in str(e)
        q, s = lk.quantize_adanorm(x, scale, shift, eps=eps, scale_max=smax, backend=backend)
    assert q.shape == x.shape
    _assert_scale_layout(s, b * t, k // 128)
    O.assert_quantized(q, s, O.adanorm_u(x, scale, shift, eps), smax, "adanorm")


@pytest.mark.parametrize("backend", _backends())
@budget(80)
@given(data=st.data())
def test_quantize_rms_fma(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=150))
    k = 128 * draw(st.sampled_from([1, 2, 3, 5]))
    dt = draw(st.sampled_from(FLOATS))
    x = relayout(make(lead + [k], dt, draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    y = relayout(make(lead + [k], draw(st.sampled_from(FLOATS)), draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    gate = bcast_tensor(draw, lead, k, draw(st.sampled_from(FLOATS)), draw(recipes(max_specials=1)), limit=4.0)
    eps, smax, inplace = draw(EPS), draw(SCALE_MAX), draw(st.booleans())
    x0 = x.clone()
    q, s, r = lk.quantize_rms_fma(x, y, gate, eps=eps, scale_max=smax, inplace=inplace, backend=backend)
    assert r.dtype == dt and r.shape == x.shape
    O.assert_rounded(r, O.rms_fma_residual(x0, y, gate), "residual")
    if inplace:
        assert r is x
    else:
        assert same_bits(x, x0), "x was modified with inplace=False"
    _assert_scale_layout(s, math.prod(lead), k // 128)
    O.assert_quantized(q, s, O.rms_normalised(r, eps), smax, "rms_fma")


@pytest.mark.parametrize("backend", _backends())
@budget(100)
@given(data=st.data())
def test_gated_attention(backend, data):
    draw = data.draw
    lead = draw(lead_shapes(max_rows=200))
    quantize = draw(st.booleans())
    if quantize:
        k = 128 * draw(st.sampled_from([1, 2, 3]))
        nh = draw(st.sampled_from([h for h in (1, 2, 3, 4, 8, 16, 32, 128) if k % h == 0]))
    else:
        nh = draw(st.sampled_from([1, 2, 3, 4, 5, 32]))
        k = nh * draw(st.one_of(st.integers(1, 70), st.sampled_from([64, 96, 100, 128])))
    x = relayout(make(lead + [k], draw(st.sampled_from(FLOATS)), draw(recipes())), draw(st.sampled_from(LAYOUTS)))
    logits = relayout(make(lead + [nh], draw(st.sampled_from(FLOATS)), draw(recipes(max_specials=2)), limit=30.0),
                      draw(st.sampled_from(LAYOUTS)))
    smax = draw(SCALE_MAX)
    out, s = lk.gated_attention(x, logits, quantize, scale_max=smax, backend=backend)
    u = O.gated_u(x, logits)
    if quantize:
        _assert_scale_layout(s, math.prod(lead), k // 128)
        O.assert_quantized(out, s, u, smax, "gated")
    else:
        assert s is None and out.dtype == x.dtype
        O.assert_rounded(out, u)


# ---------------------------------------------------------------------------------------------
# GEMM and the quantized linears

def gemm_noise(backend, device, k):
    """fp32 accumulation: at most k additions of 2^-24 each, relative to the sum of absolute terms
    (torch, and the interpreter's fp32 dot). Hopper's FP8 MMA keeps about 13 mantissa bits while it
    accumulates (truncating), a few times per 128-block (4 k32 steps and the operand alignment)
    before each block is promoted in fp32: 5 * 2^-13 < 2^-10.6; 2^-9 leaves a factor of three."""
    if device.type == "cuda" and backend != "torch":
        return 2.0 ** -9
    return max(k, 128) * 2.0 ** -24


# bias and out are parameters, not draws: each pair launches its own set of Triton
# specializations (HAS_BIAS, the output's row stride), so under the gpu profile the four ids
# compile in parallel processes instead of about 150 kernels one after another in one.
@pytest.mark.parametrize("with_out", [False, True], ids=["no_out", "out"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("backend", _backends("cuda"))
@budget(20)
@given(data=st.data())
def test_fp8_gemm_nt(backend, with_bias, with_out, data):
    draw = data.draw
    m = draw(st.sampled_from([0, 1, 2, 7, 64, 129, 200]))
    n, k = 128 * draw(st.integers(1, 3)), 128 * draw(st.integers(1, 4))
    a = relayout(draw(fp8_codes([m, k], nan=False)).to(DEVICE), draw(st.sampled_from(LAYOUTS)))
    b = relayout(draw(fp8_codes([n, k], nan=False)).to(DEVICE), draw(st.sampled_from(LAYOUTS)))
    sav = (_positive_scales(draw, (m, k // 128)) if draw(st.booleans()) else
           torch.exp2(torch.randint(-8, 8, (m, k // 128)).float())).to(DEVICE)
    how = draw(st.sampled_from(["m_major", "contiguous", "transposed", "offset"]))
    if how == "m_major":
        sa = torch.zeros(k // 128, (m + 3) // 4 * 4, device=DEVICE).t()[:m]
        sa.copy_(sav)
    else:
        sa = relayout(sav, how)
    # The kernels promote each block with the product sa * sb, which must stay finite in fp32:
    # past it a zero dot gives inf * 0 = NaN (scales that large, |x| |w| > ~7e43 before
    # quantization, are outside the ops' range), and so must the partial sums (here sa * sb <=
    # 2^97 and a block's dot <= 128 * 448^2 < 2^25).
    sb = relayout(torch.exp2(torch.randint(-8, 8, (n // 128, k // 128))).float().to(DEVICE),
                  draw(st.sampled_from(LAYOUTS)))
    bias = make([n], draw(st.sampled_from(FLOATS)), draw(recipes(nonfinite=False, kinds=("normal",)))) \
        if with_bias else None
    out = None
    if with_out:
        out = torch.full((m, n + 8), math.nan, dtype=BF16, device=DEVICE)[:, :n]  # poisoned, row stride > N
    try:
        d = lk.fp8_gemm_nt(a, sa, b, sb, bias, out=out, backend=backend)
    except lk.BackendUnavailable as e:  # the SM90 kernel's documented limits: TMA alignment
        assert backend == "cuda" and "aligned" in str(e), e
        return
    if out is not None:
        assert d is out
    assert d.dtype == BF16 and d.shape == (m, n)
    want, mag = O.fp8_gemm_nt(a, sa, b, sb, bias.float() if bias is not None else None)
    O.assert_rounded(d, O.Noisy(want, gemm_noise(backend, DEVICE, k) * mag))


@pytest.mark.parametrize("backend", ["torch", "triton"] + (["auto"] if DEVICE.type == "cuda" else []))
@budget(50)
@given(data=st.data())
def test_quantized_linears(backend, data):
    draw = data.draw
    cls = draw(st.sampled_from([lk.BlockwiseFP8Linear, lk.BlockwiseFP6Linear]))
    fin, fout = 128 * draw(st.integers(1, 3)), 128 * draw(st.integers(1, 3))
    wt = draw(st.sampled_from(FLOATS))
    lin = torch.nn.Linear(fin, fout, bias=draw(st.booleans()), device=DEVICE, dtype=wt)
    with torch.no_grad():
        lin.weight.copy_(make([fout, fin], wt, draw(recipes(nonfinite=False, bound=1e6)), limit=1e4))
    layer = cls.from_linear(lin, backend=backend)
    smax = cls.scale_max
    wq, ws = O.quantize_weights_blockwise(lin.weight.detach(), smax)
    O.assert_same_codes(layer.fp8weight, wq, "weight codes")
    O.assert_equal_values(layer.weight_scale, ws, "weight_scale")
    if cls is lk.BlockwiseFP6Linear:
        assert torch.equal(layer.weight.cpu(), O.fp6_pack(wq.to(torch.float32).to(FP8)))
    lead = draw(lead_shapes(max_rows=70))
    # (|x| |w| stays below ~7e43, where the product of the two block scales would overflow fp32:
    # see test_fp8_gemm_nt)
    x = relayout(make(lead + [fin], draw(st.sampled_from(FLOATS)),
                      draw(recipes(nonfinite=False, kinds=KINDS[:3] + KINDS[4:], bound=1e6))),
                 draw(st.sampled_from(LAYOUTS)))
    xin = lk.quantize_blockwise(x, backend="torch") if draw(st.booleans()) else x
    y = layer(xin)
    assert y.dtype == BF16 and y.shape == (*lead, fout)
    xq, xs = O.quantize_blockwise(x, lk.FP8_SCALE_MAX)
    codes = xq.reshape(-1, fin).to(torch.float32).to(FP8)
    bias = layer.bias.detach() if layer.bias is not None else None
    want, mag = O.fp8_gemm_nt(codes, xs.float(), wq.to(torch.float32).to(FP8), ws.float(), bias)
    O.assert_rounded(y.reshape(-1, fout), O.Noisy(want, gemm_noise(backend, DEVICE, fin) * mag))


# ---------------------------------------------------------------------------------------------
# All2All: the torch backend over gloo processes (one hypothesis run per rank, in step), and on a
# GPU the CUDA-IPC kernels with every rank in one process

A2A_DTYPES = (BF16, FP8, torch.float16, torch.float32)


def _a2a_inputs(counts, b, h, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, c, h, d, generator=g) * 100).to(dtype) for c in counts]


def _a2a_cases(world):
    return st.tuples(st.lists(st.integers(0, 6), min_size=world, max_size=world), st.integers(1, 2),
                     st.integers(1, 3), st.integers(1, 9), st.sampled_from(A2A_DTYPES), st.integers(0, 2 ** 31 - 1))


def _a2a_worker(rank, world, path, n_examples):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    seqlen, hidden = 2 * 6 * world, 3 * world * 9
    comms = {dt: lk.All2All(rank, world, seqlen, hidden, world, dt, backend="torch", timeout_seconds=60,
                            device="cpu") for dt in A2A_DTYPES}

    # Every rank draws the same examples (derandomized, no database, no shrinking), so their
    # collectives stay in step; a failing rank leaves the others to time out.
    @settings(max_examples=n_examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=_a2a_cases(world))
    def run(case):
        counts, b, hpr, d, dtype, seed = case
        xs = _a2a_inputs(counts, b, hpr * world, d, dtype, seed)
        a2a = comms[dtype]
        a2a.set_rank_tokens(counts)
        y = a2a.send_recv_heads(xs[rank])
        assert same_bits(y, O.send_recv_heads(xs)[rank]), (rank, case)
        assert same_bits(a2a.gather_heads(y), xs[rank]), (rank, case)
        assert same_bits(a2a.allgather(xs[rank]), O.allgather(xs)[rank]), (rank, case)

    run()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # see test_all2all._finish: skip the interpreter's teardown


def test_all2all_torch_backend_random_rounds():
    import torch.multiprocessing as mp

    n = max(1, round(200 * settings().max_examples / 10))
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_a2a_worker, args=(3, os.path.join(tmp, "rendezvous"), n), nprocs=3, join=True)


_cuda_a2a = DEVICE.type == "cuda" and _ext.load("_C_all2all")[0] is not None


@pytest.mark.skipif(not _cuda_a2a, reason="needs a GPU and the _C_all2all extension")
@budget(20)
@given(world=st.sampled_from([2, 4, 8]), data=st.data())
def test_all2all_cuda_local_ranks(world, data):
    counts, b, hpr, d, dtype, seed = data.draw(_a2a_cases(world))
    counts = [c * data.draw(st.sampled_from([1, 1, 50])) for c in counts]  # now and then 300 tokens
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    seqlen = max(1, b * sum(counts))
    ranks = lk.All2All.local_ranks(world, seqlen, hpr * world * d, max(world, sms // world), dtype, 10.0)
    streams = [torch.cuda.Stream() for _ in ranks]
    try:
        for a in ranks:
            a.set_rank_tokens(counts)
        xs = [x.cuda() for x in _a2a_inputs(counts, b, hpr * world, d, dtype, seed)]
        ys = run_local_checked(ranks, streams, "send_recv_heads", xs, copy_out=True)
        assert all(same_bits(y, w) for y, w in zip(ys, O.send_recv_heads(xs)))
        back = run_local_checked(ranks, streams, "gather_heads", ys, copy_out=True)
        assert all(same_bits(o, x) for o, x in zip(back, xs))
        ag = run_local_checked(ranks, streams, "allgather", xs, copy_out=True)
        assert all(same_bits(o, w) for o, w in zip(ag, O.allgather(xs)))
    finally:
        torch.cuda.synchronize()
        for a in ranks:
            a.destroy()


# ---------------------------------------------------------------------------------------------
# Invalid input: a ValueError / TypeError whose message names the argument. Every mutation below
# runs on each backend; hypothesis varies the valid inputs around it (shapes, dtypes, bad values).

class _Base:
    pass


def _norm_base(draw):
    v = _Base()
    lead = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    d = 2 * draw(st.integers(1, 40))
    v.x = torch.randn(*lead, d, device=DEVICE, dtype=draw(st.sampled_from(FLOATS)))
    v.c, v.w = torch.randn(lead[-1], d, device=DEVICE), torch.randn(d, device=DEVICE)
    v.eps = draw(st.sampled_from([-1e-6, -1.0, math.nan, math.inf]))
    b, t, nh, dh = 2, 3, draw(st.sampled_from([1, 2, 4])), 2 * draw(st.integers(1, 16))
    v.xs = torch.randn(b, t, nh * dh, device=DEVICE, dtype=BF16)
    v.f = torch.randn(1, nh, t, dh // 2, device=DEVICE)
    v.f3 = torch.randn(3, nh, t, dh // 2, device=DEVICE)
    return v


def _quant_base(draw):
    v = _Base()
    lead = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    v.k = 128 * draw(st.integers(1, 3))
    v.x = torch.randn(*lead, v.k, device=DEVICE, dtype=draw(st.sampled_from(FLOATS)))
    v.q, v.s = lk.quantize_blockwise(v.x, backend="torch")
    v.mod = torch.zeros(*lead, v.k, device=DEVICE)
    v.lg = torch.zeros(*lead, 2, device=DEVICE)
    v.smax = draw(st.sampled_from([0.0, -1.0, math.nan, math.inf]))
    v.w = torch.randn(128 * draw(st.integers(1, 2)), 128, device=DEVICE)
    return v


def _gemm_base(draw):
    v = _Base()
    v.m = draw(st.integers(1, 9))
    v.n, v.k = 128 * draw(st.integers(1, 2)), 128 * draw(st.integers(1, 2))
    v.a, v.sa = lk.quantize_blockwise(torch.randn(v.m, v.k, device=DEVICE), backend="torch")
    v.b, v.sb = lk.quantize_weights_blockwise(torch.randn(v.n, v.k, device=DEVICE), backend="torch")
    v.codes = torch.zeros(v.m, 4 * draw(st.integers(1, 4)), dtype=torch.uint8, device=DEVICE)
    return v


def _int(t):
    return t.to(torch.int32)


def _cut(t, n):
    """t without its last n columns (one column at least stays)."""
    return t[..., : max(1, t.shape[-1] - n)]


_BASES = {"norm": _norm_base, "quant": _quant_base, "gemm": _gemm_base}
BAD_INPUTS = [
    ("norm", "x", lambda v, be: lk.rms_norm_rope(_int(v.x), v.c, v.c, backend=be)),
    ("norm", "x", lambda v, be: lk.rms_norm_rope(v.x.double(), v.c, v.c, backend=be)),
    ("norm", "x", lambda v, be: lk.rms_norm_rope(v.x[..., :-1], v.c[..., :-1], v.c[..., :-1], backend=be)),
    ("norm", "x", lambda v, be: lk.rms_norm_rope(v.x.tolist(), v.c, v.c, backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_rope(v.x, v.c[..., :-2], v.c, backend=be)),
    ("norm", "sin_freqs", lambda v, be: lk.rms_norm_rope(v.x, v.c, torch.cat([v.c, v.c[:1]]), backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_rope(v.x, None, v.c, backend=be)),
    ("norm", "sin_freqs", lambda v, be: lk.rms_norm_rope(v.x, v.c, _int(v.c), backend=be)),
    ("norm", "weights", lambda v, be: lk.rms_norm_rope(v.x, v.c, v.c, v.w[:-2], backend=be)),
    ("norm", "weights", lambda v, be: lk.rms_norm_rope(v.x, v.c, v.c, _int(v.w), backend=be)),
    ("norm", "eps", lambda v, be: lk.rms_norm_rope(v.x, v.c, v.c, eps=v.eps, backend=be)),
    ("norm", "x", lambda v, be: lk.rms_norm_split_rope(v.xs[0], v.f, v.f, backend=be)),
    ("norm", "x", lambda v, be: lk.rms_norm_split_rope(_int(v.xs), v.f, v.f, backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f[0], v.f, backend=be)),
    ("norm", "sin_freqs", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f, v.f[:, :, :-1], backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f[:, :, :-1], v.f[:, :, :-1], backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f3, v.f3, backend=be)),
    ("norm", "cos_freqs", lambda v, be: lk.rms_norm_split_rope(v.xs[..., :-1], v.f, v.f, backend=be)),
    ("norm", "weights", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f, v.f, v.f.reshape(-1)[:3], backend=be)),
    ("norm", "eps", lambda v, be: lk.rms_norm_split_rope(v.xs, v.f, v.f, eps=v.eps, backend=be)),
    ("quant", "x", lambda v, be: lk.quantize_blockwise(v.x[..., :100], backend=be)),
    ("quant", "x", lambda v, be: lk.quantize_blockwise(v.x.to(FP8), backend=be)),
    ("quant", "x", lambda v, be: lk.quantize_blockwise(v.x.sum(), backend=be)),
    ("quant", "x", lambda v, be: lk.quantize_blockwise(v.x.tolist(), backend=be)),
    ("quant", "scale_max", lambda v, be: lk.quantize_blockwise(v.x, scale_max=v.smax, backend=be)),
    ("quant", "w", lambda v, be: lk.quantize_weights_blockwise(v.w.reshape(-1), backend=be)),
    ("quant", "w.shape[0]", lambda v, be: lk.quantize_weights_blockwise(v.w[:100], backend=be)),
    ("quant", "w.shape[1]", lambda v, be: lk.quantize_weights_blockwise(v.w[:, :100], backend=be)),
    ("quant", "w", lambda v, be: lk.quantize_weights_blockwise(_int(v.w), backend=be)),
    ("quant", "scale_max", lambda v, be: lk.quantize_weights_blockwise(v.w, scale_max=v.smax, backend=be)),
    ("quant", "q", lambda v, be: lk.dequantize_blockwise(v.x, v.s, backend=be)),
    ("quant", "scales", lambda v, be: lk.dequantize_blockwise(v.q, v.s.half(), backend=be)),
    ("quant", "scales", lambda v, be: lk.dequantize_blockwise(v.q, _cut(v.s, 1) if v.k > 128 else v.s[:0], backend=be)),
    ("quant", "scales", lambda v, be: lk.dequantize_blockwise(v.q, v.s.reshape(-1), backend=be)),
    ("quant", "out_dtype", lambda v, be: lk.dequantize_blockwise(v.q, v.s, out_dtype=torch.int8, backend=be)),
    ("quant", "scale", lambda v, be: lk.quantize_adanorm(v.x, _cut(v.mod, 128), v.mod, backend=be)),
    ("quant", "scale", lambda v, be: lk.quantize_adanorm(v.x, [0.0] * v.k, v.mod, backend=be)),
    ("quant", "shift", lambda v, be: lk.quantize_adanorm(v.x, v.mod, torch.zeros(7, 5, v.k, device=DEVICE), backend=be)),
    ("quant", "shift", lambda v, be: lk.quantize_adanorm(v.x, v.mod, _int(v.mod), backend=be)),
    ("quant", "eps", lambda v, be: lk.quantize_adanorm(v.x, v.mod, v.mod, eps=-1.0, backend=be)),
    ("quant", "scale_max", lambda v, be: lk.quantize_adanorm(v.x, v.mod, v.mod, scale_max=v.smax, backend=be)),
    ("quant", "y", lambda v, be: lk.quantize_rms_fma(v.x.clone(), _cut(v.x, 128), v.mod, backend=be)),
    ("quant", "y", lambda v, be: lk.quantize_rms_fma(v.x.clone(), _int(v.x), v.mod, backend=be)),
    ("quant", "gate", lambda v, be: lk.quantize_rms_fma(v.x.clone(), v.x, torch.zeros(9, 9, v.k, device=DEVICE),
                                                        backend=be)),
    ("quant", "eps", lambda v, be: lk.quantize_rms_fma(v.x.clone(), v.x, v.mod, eps=math.nan, backend=be)),
    ("quant", "gate_logits", lambda v, be: lk.gated_attention(v.x, torch.zeros(*v.x.shape[:-1], 3 if v.k % 3 else 7,
                                                                               device=DEVICE), backend=be)),
    ("quant", "gate_logits", lambda v, be: lk.gated_attention(v.x, torch.zeros(9, 2, device=DEVICE), backend=be)),
    ("quant", "gate_logits", lambda v, be: lk.gated_attention(v.x, _int(v.lg), backend=be)),
    ("quant", "x", lambda v, be: lk.gated_attention(v.x[..., :96], v.lg, backend=be)),
    ("quant", "scale_max", lambda v, be: lk.gated_attention(v.x, v.lg, scale_max=v.smax, backend=be)),
    ("gemm", "x", lambda v, be: lk.fp6_pack(v.codes.float(), backend=be)),
    ("gemm", "x.shape[-1]", lambda v, be: lk.fp6_pack(v.codes[:, :-2], backend=be)),
    ("gemm", "x", lambda v, be: lk.fp6_pack(v.codes[0, 0], backend=be)),
    ("gemm", "p", lambda v, be: lk.fp6_unpack(v.codes.to(torch.int16), 8, backend=be)),
    ("gemm", "n", lambda v, be: lk.fp6_unpack(v.codes[:, :3], 4.0, backend=be)),
    ("gemm", "n", lambda v, be: lk.fp6_unpack(v.codes[:, :3], 6, backend=be)),
    ("gemm", "p", lambda v, be: lk.fp6_unpack(v.codes[:, :3], 8, backend=be)),
    ("gemm", "a", lambda v, be: lk.fp8_gemm_nt(v.a.float(), v.sa, v.b, v.sb, backend=be)),
    ("gemm", "b", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, [[0.0] * v.k] * v.n, v.sb, backend=be)),
    ("gemm", "b", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b[:, :64], v.sb, backend=be)),
    ("gemm", "N", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b[:100], v.sb, backend=be)),
    ("gemm", "a_scales", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa[:0], v.b, v.sb, backend=be)),
    ("gemm", "a_scales", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa.double(), v.b, v.sb, backend=be)),
    ("gemm", "b_scales", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb[:0], backend=be)),
    ("gemm", "bias", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb, torch.zeros(v.n + 1, device=DEVICE), backend=be)),
    ("gemm", "bias", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb, _int(torch.zeros(v.n, device=DEVICE)),
                                                  backend=be)),
    ("gemm", "out", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb, out=torch.empty(v.m, v.n, device=DEVICE),
                                                 backend=be)),
    ("gemm", "out", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb, backend=be,
                                                 out=torch.empty(v.m + 1, v.n, dtype=BF16, device=DEVICE))),
    ("gemm", "out", lambda v, be: lk.fp8_gemm_nt(v.a, v.sa, v.b, v.sb, backend=be,
                                                 out=torch.empty(v.m, 2 * v.n, dtype=BF16, device=DEVICE)[:, ::2])),
    ("gemm", "in_features", lambda v, be: lk.BlockwiseFP8Linear(v.k + 1, v.n, backend=be)),
    ("gemm", "out_features", lambda v, be: lk.BlockwiseFP6Linear(v.k, 0, backend=be)),
    ("gemm", "linear", lambda v, be: lk.BlockwiseFP8Linear.from_linear(torch.nn.Conv1d(1, 1, 1), backend=be)),
    ("gemm", "x", lambda v, be: lk.BlockwiseFP8Linear(v.k, v.n, device=DEVICE, backend=be)(
        torch.randn(v.m, v.k + 128, device=DEVICE))),
    ("gemm", "x", lambda v, be: lk.BlockwiseFP8Linear(v.k, v.n, device=DEVICE, backend=be)(
        _int(torch.ones(v.m, v.k, device=DEVICE)))),
    ("gemm", "pair", lambda v, be: lk.BlockwiseFP8Linear(v.k, v.n, device=DEVICE, backend=be)((v.a,))),
]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[f"{i}-{c[1]}" for i, c in enumerate(BAD_INPUTS)])
@budget(2)
@given(data=st.data())
def test_bad_input_names_the_argument(backend, case, data):
    family, name, call = case
    v = _BASES[family](data.draw)
    with pytest.raises((ValueError, TypeError), match=re.escape(name)):
        call(v, backend)
