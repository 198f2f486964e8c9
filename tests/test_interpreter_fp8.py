"""The interpreter's e4m3 / bf16 casts are made to match sm_90 hardware (ltx_kernels/triton/_interpreter.py)."""
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")


def _cast_kernel():
    from ltx_kernels.triton import prepare

    prepare()
    import triton
    import triton.language as tl

    @triton.jit
    def cast(x_ptr, o8_ptr, o16_ptr, back_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        q = x.to(tl.float8e4nv)
        tl.store(o8_ptr + offs, q)
        tl.store(o16_ptr + offs, x.to(tl.bfloat16))
        tl.store(back_ptr + offs, q.to(tl.float32))

    return cast


def test_fp32_to_e4m3_matches_hardware_rounding():
    vals = torch.tensor([1.97, -125.0, 592.0, -592.0, 1e6, float("nan"), 1e-3, 0.0,
                         -0.0, 2.0 ** -9, 3 * 2.0 ** -10, 1.0625, 1.1875, 464.0, 447.9, 2.0 ** -11])
    n = 16
    o8 = torch.empty(n, dtype=torch.float8_e4m3fn)
    o16 = torch.empty(n, dtype=torch.bfloat16)
    back = torch.empty(n)
    _cast_kernel()[(1,)](vals, o8, o16, back, N=n)
    want = vals.clamp(-448, 448).to(torch.float8_e4m3fn)  # RNE + saturation, NaN kept
    assert torch.equal(o8.view(torch.uint8), want.view(torch.uint8)), (o8.float(), want.float())
    # the values where the stock interpreter differs: a tie rounded away, the exponent carry, wrapping past 448
    assert o8[0].float() == 2.0 and o8[1].float() == -128.0 and o8[2].float() == 448.0 and o8[3].float() == -448.0
    assert torch.isnan(o8[5].float())
    assert o8[11].float() == 1.0 and o8[12].float() == 1.25  # ties to even
    assert torch.equal(back[~torch.isnan(vals)], want.float()[~torch.isnan(vals)]) and torch.isnan(back[5])
    assert torch.equal(o16.view(torch.int16), vals.to(torch.bfloat16).view(torch.int16))  # RNE, not truncation


def test_random_values_cast_like_torch_saturated():
    n = 1024
    vals = torch.randn(n) * torch.logspace(-4, 3, n)
    o8 = torch.empty(n, dtype=torch.float8_e4m3fn)
    o16 = torch.empty(n, dtype=torch.bfloat16)
    back = torch.empty(n)
    _cast_kernel()[(1,)](vals, o8, o16, back, N=n)
    assert torch.equal(o8.view(torch.uint8), vals.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8))
    assert torch.equal(o16.view(torch.int16), vals.to(torch.bfloat16).view(torch.int16))


def test_bf16_subnormals_widen_exactly():
    """bf16 -> fp32 is a 16-bit shift on the GPU; the interpreter's own conversion mis-scaled bf16
    subnormals (-3.49e-39 -> -2.20e-39)."""
    from ltx_kernels.triton import prepare

    prepare()
    import triton
    import triton.language as tl

    @triton.jit
    def widen(x_ptr, o_ptr, h_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(o_ptr + offs, x.to(tl.float32))
        tl.store(h_ptr + offs, x.to(tl.float16))

    # every exponent, every positive and negative subnormal, a binade of mantissas: 1024 patterns
    bits = torch.cat([torch.arange(0, 1 << 16, 128), torch.arange(1, 129), torch.arange(0x8001, 0x8081),
                      torch.arange(0x3F80, 0x4080)]).to(torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16)
    o = torch.empty(x.numel())
    h = torch.empty(x.numel(), dtype=torch.float16)
    widen[(1,)](x, o, h, N=x.numel())
    want = x.float()
    same = (o == want) | (o.isnan() & want.isnan())
    assert same.all(), (x[~same][:4], o[~same][:4])
    assert torch.equal(torch.signbit(o), torch.signbit(want))
    assert torch.equal(h.view(torch.int16), want.to(torch.float16).view(torch.int16))
