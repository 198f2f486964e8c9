import numpy as np
import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch, norm_rope
from ltx_kernels import reference as ref

import oracle
from helpers import assert_fp8_close, assert_rounded_close

BF16 = torch.bfloat16


def _split_freqs(b, t, nh, dh, device, dtype=BF16):
    """ltx-core's layout: [B, T, H, Dh/2] swapped to a [B, H, T, Dh/2] view."""
    c = torch.randn(b, t, nh, dh // 2, device=device).to(dtype).swapaxes(1, 2)
    s = torch.randn(b, t, nh, dh // 2, device=device).to(dtype).swapaxes(1, 2)
    return c, s


def _check(out, x, fn32, out_fp8):
    want = fn32()
    if out_fp8:
        assert out.dtype == torch.float8_e4m3fn
        assert_fp8_close(out, want)
    else:
        assert out.dtype == x.dtype
        assert_rounded_close(out, want, ulps=1.0)


@pytest.mark.parametrize("d", [64, 96, 2048, 4096])
@pytest.mark.parametrize("out_fp8", [False, True])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("b", [1, 2])
def test_interleaved_matches_reference(device, d, out_fp8, weights, b):
    t = 3
    x = torch.randn(b, t, d, device=device, dtype=BF16)
    c = torch.randn(1, t, d, device=device, dtype=BF16)  # broadcast over batch
    s = torch.randn(1, t, d, device=device, dtype=BF16)
    w = torch.randn(d, device=device, dtype=BF16) if weights else None
    out = lk.rms_norm_rope(x, c, s, w, out_fp8, backend="triton")
    _check(out, x, lambda: ref.rms_norm_rope(x.float(), c, s, w, False), out_fp8)


@pytest.mark.parametrize("nh,dh", [(4, 64), (3, 64), (32, 64), (5, 128), (2, 96)])
@pytest.mark.parametrize("out_fp8", [False, True])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("b,bf", [(1, 1), (2, 1), (2, 2)])
def test_split_matches_reference(device, nh, dh, out_fp8, weights, b, bf):
    t = 5
    x = torch.randn(b, t, nh * dh, device=device, dtype=BF16)
    c, s = _split_freqs(bf, t, nh, dh, device)
    w = torch.randn(nh * dh, device=device, dtype=BF16) if weights else None
    out = lk.rms_norm_split_rope(x, c, s, w, out_fp8, backend="triton")
    _check(out, x, lambda: ref.rms_norm_split_rope(x.float(), c, s, w, False), out_fp8)


def test_split_contiguous_freqs_and_row_strided_x(device):
    b, t, nh, dh = 2, 4, 4, 64
    big = torch.randn(b, t, nh * dh + 64, device=device, dtype=BF16)
    x = big[..., : nh * dh]  # row stride > row length
    c = torch.randn(b, nh, t, dh // 2, device=device, dtype=BF16)
    s = torch.randn(b, nh, t, dh // 2, device=device, dtype=BF16)
    out = lk.rms_norm_split_rope(x, c, s, backend="triton")
    assert_rounded_close(out, ref.rms_norm_split_rope(x.float(), c, s))


def test_interleaved_strided_x_and_per_token_freqs(device):
    d = 128
    big = torch.randn(6, d * 2, device=device, dtype=BF16)
    x = big[:, :d]
    c = torch.randn(6, d, device=device, dtype=BF16)
    s = torch.randn(6, d, device=device, dtype=BF16)
    out = lk.rms_norm_rope(x, c, s, backend="triton")
    assert_rounded_close(out, ref.rms_norm_rope(x.float(), c, s))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_other_input_dtypes(device, dtype):
    x = torch.randn(2, 3, 256, device=device, dtype=dtype)
    c, s = _split_freqs(1, 3, 2, 128, device, dtype)
    out = lk.rms_norm_split_rope(x, c, s, backend="triton")
    assert_rounded_close(out, ref.rms_norm_split_rope(x.float(), c, s))
    ci = torch.randn(3, 256, device=device, dtype=dtype)
    out = lk.rms_norm_rope(x, ci, ci, backend="triton")
    assert_rounded_close(out, ref.rms_norm_rope(x.float(), ci, ci))


def test_zero_rows_give_zeros_not_nan(device):
    x = torch.randn(1, 4, 256, device=device, dtype=BF16)
    x[0, 1] = 0
    c, s = _split_freqs(1, 4, 4, 64, device)
    for out_fp8 in (False, True):
        out = lk.rms_norm_split_rope(x, c, s, None, out_fp8, backend="triton")
        assert torch.isfinite(out.float()).all() and (out[0, 1].float() == 0).all()
        ci = torch.randn(1, 4, 256, device=device, dtype=BF16)
        out = lk.rms_norm_rope(x, ci, ci, None, out_fp8, backend="triton")
        assert torch.isfinite(out.float()).all() and (out[0, 1].float() == 0).all()


def test_fp8_output_saturates(device):
    x = torch.randn(1, 2, 128, device=device, dtype=BF16)
    w = torch.full((128,), 300.0, device=device, dtype=BF16)  # |y| far past 448
    c = torch.ones(1, 2, 128, device=device, dtype=BF16)
    s = torch.zeros(1, 2, 128, device=device, dtype=BF16)
    out = lk.rms_norm_rope(x, c, s, w, True, backend="triton").float()
    assert torch.isfinite(out).all() and out.abs().max() == 448
    want = ref.rms_norm_rope(x.float(), c, s, w, False)
    assert_fp8_close(lk.rms_norm_rope(x, c, s, w, True, backend="triton"), want)


def test_many_tokens_grid(device):
    t = 70000 if device.type == "cuda" else 300  # >65535 programs on the GPU
    x = torch.randn(1, t, 64, device=device, dtype=BF16)
    c, s = _split_freqs(1, t, 1, 64, device)
    out = lk.rms_norm_split_rope(x, c, s, backend="triton")
    assert_rounded_close(out, ref.rms_norm_split_rope(x.float(), c, s))


def test_empty_tokens(device):
    x = torch.randn(1, 0, 256, device=device, dtype=BF16)
    c, s = _split_freqs(1, 0, 2, 128, device)
    assert lk.rms_norm_split_rope(x, c, s, backend="triton").shape == x.shape


def test_torch_backend_matches_independent_oracle(device):
    """The torch backend is the reference the other tests compare with: here it meets the float64
    oracle of tests/oracle.py instead (written apart from reference.py)."""
    x = torch.randn(2, 3, 256, device=device, dtype=BF16)
    c, s = _split_freqs(1, 3, 2, 128, device)
    w = torch.randn(256, device=device, dtype=BF16)
    oracle.assert_rounded(lk.rms_norm_split_rope(x, c, s, w, backend="torch"), oracle.rms_norm_split_rope(x, c, s, w, 1e-6))
    ci = torch.randn(1, 3, 256, device=device, dtype=BF16)
    si = torch.randn(3, 256, device=device, dtype=torch.float32)
    oracle.assert_rounded(lk.rms_norm_rope(x, ci, si, w, backend="torch"), oracle.rms_norm_rope(x, ci, si, w, 1e-6))
    oracle.assert_rounded(lk.rms_norm_rope(x, ci, si, None, True, backend="torch"),
                          oracle.rms_norm_rope(x, ci, si, None, 1e-6))


# --- bad input ----------------------------------------------------------------------------------

def test_split_bad_inputs(device):
    x = torch.randn(1, 4, 256, device=device, dtype=BF16)
    c, s = _split_freqs(1, 4, 4, 64, device)
    with pytest.raises(TypeError, match="x must have dtype"):
        lk.rms_norm_split_rope(x.to(torch.int32), c, s)
    with pytest.raises(ValueError, match="must divide"):
        lk.rms_norm_split_rope(torch.randn(1, 4, 250, device=device, dtype=BF16), c, s)
    with pytest.raises(ValueError, match="must be even"):
        c3, s3 = torch.randn(1, 3, 4, 1), torch.randn(1, 3, 4, 1)
        lk.rms_norm_split_rope(torch.randn(1, 4, 3, dtype=BF16), c3, s3)
    with pytest.raises(ValueError, match="cos_freqs/sin_freqs must be"):
        lk.rms_norm_split_rope(x, c[:, :, :3], s[:, :, :3])
    with pytest.raises(ValueError, match="must match"):
        lk.rms_norm_split_rope(x, c, s[:, :, :3])
    with pytest.raises(ValueError, match="3-D"):
        lk.rms_norm_split_rope(x[0], c, s)
    with pytest.raises(ValueError, match="weights must have shape"):
        lk.rms_norm_split_rope(x, c, s, torch.ones(128, device=device, dtype=BF16))
    with pytest.raises(ValueError, match="backend must be one of"):
        lk.rms_norm_split_rope(x, c, s, backend="cutlass")


def test_interleaved_bad_inputs(device):
    x = torch.randn(2, 4, 64, device=device, dtype=BF16)
    c = torch.randn(4, 64, device=device, dtype=BF16)
    with pytest.raises(ValueError, match="even"):
        lk.rms_norm_rope(torch.randn(2, 63, device=device, dtype=BF16), c[:, :63], c[:, :63])
    with pytest.raises(ValueError, match="does not broadcast"):
        lk.rms_norm_rope(x, torch.randn(3, 64, device=device, dtype=BF16), c)
    with pytest.raises(ValueError, match="last dim"):
        lk.rms_norm_rope(x, c[:, :32], c)
    with pytest.raises(TypeError, match="cos_freqs must be a torch.Tensor"):
        lk.rms_norm_rope(x, None, c)
    with pytest.raises(ValueError, match="eps"):
        lk.rms_norm_rope(x, c, c, eps=-1)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="is on"):
            lk.rms_norm_rope(x.cpu(), c.cuda(), c.cuda())


@pytest.mark.parametrize("variant", ["interleaved", "split"])
@pytest.mark.parametrize("out_fp8", [False, True])
def test_repeat_calls_same_signature(device, variant, out_fp8):
    """Fresh inputs of one signature, call after call: on a GPU the second call onwards takes the
    per-signature plan (direct launch of the compiled kernel), which must give the same results;
    weights as a strided view need a copy, so no plan may read them in place."""
    from ltx_kernels import norm_rope

    b, t, nh, dh = 2, 5, 4, 64
    d = nh * dh
    for i in range(4):
        x = torch.randn(b, t, d, device=device, dtype=BF16)
        w = torch.randn(2 * d, device=device, dtype=BF16)[::2] if i >= 2 else torch.randn(d, device=device, dtype=BF16)
        if variant == "split":
            c, s = _split_freqs(1, t, nh, dh, device)
            out = lk.rms_norm_split_rope(x, c, s, w, out_fp8, backend="triton")
            _check(out, x, lambda: ref.rms_norm_split_rope(x.float(), c, s, w, False), out_fp8)
        else:
            c = torch.randn(1, t, d, device=device, dtype=BF16)
            s = torch.randn(1, t, d, device=device, dtype=BF16)
            out = lk.rms_norm_rope(x, c, s, w, out_fp8, backend="triton")
            _check(out, x, lambda: ref.rms_norm_rope(x.float(), c, s, w, False), out_fp8)
    if device.type == "cuda":
        key = _dispatch.signature((variant, x, c, s, w, 1e-6, out_fp8, "triton", norm_rope.tuning.generation))
        assert norm_rope._plans.get(key) is None, "a plan kept for weights that needed a copy"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA streams and graphs")
def test_planned_call_on_side_stream_and_in_graph():
    b, t, d = 1, 64, 512
    x = torch.randn(b, t, d, device="cuda", dtype=BF16)
    c = torch.randn(1, t, d, device="cuda", dtype=BF16)
    s = torch.randn(1, t, d, device="cuda", dtype=BF16)
    want = ref.rms_norm_rope(x.float(), c, s, None, False)
    for _ in range(2):  # the second call is planned
        lk.rms_norm_rope(x, c, s)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = lk.rms_norm_rope(x, c, s)
    torch.cuda.current_stream().wait_stream(side)
    assert_rounded_close(out, want)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = lk.rms_norm_rope(x, c, s)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert_rounded_close(out, ref.rms_norm_rope(x.float(), c, s, None, False))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, in the interpreter
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("big", [2e19, 1e30, 3e38])
def test_huge_rows_are_normalised(device, backend, dtype, big):
    """Rows whose sum of squares overflows fp32 (|x| >= ~1.8e19) are still normalised, not zeroed
    (float64 oracle)."""
    t, nh, dh = 3, 2, 64
    h = nh * dh
    x = torch.randn(1, t, h, device=device)
    x[0, 1] = x[0, 1].clamp(-1, 1) * big
    x[0, 2, 5] = big
    x = x.to(dtype)
    xd = x.double()
    y = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    c, s = _split_freqs(1, t, nh, dh, device, dtype)
    cd, sd = c.double().transpose(1, 2), s.double().transpose(1, 2)  # [1, T, H, Dh/2]
    y1, y2 = y.view(1, t, nh, dh)[..., : dh // 2], y.view(1, t, nh, dh)[..., dh // 2:]
    want = torch.cat((y1 * cd - y2 * sd, y2 * cd + y1 * sd), -1).view(1, t, h)
    assert_rounded_close(lk.rms_norm_split_rope(x, c, s, backend=backend), want.float())
    ci = torch.randn(1, t, h, device=device).to(dtype)
    si = torch.randn(1, t, h, device=device).to(dtype)
    rot = torch.stack((-y[..., 1::2], y[..., 0::2]), -1).flatten(-2)
    want = y * ci.double() + rot * si.double()
    assert_rounded_close(lk.rms_norm_rope(x, ci, si, backend=backend), want.float())
    assert_fp8_close(lk.rms_norm_rope(x, ci, si, None, True, backend=backend), want.float())


@pytest.mark.parametrize("op", ["interleaved", "split"])
def test_scalar_arguments_are_checked_by_value(device, op):
    x = torch.randn(2, 3, 128, device=device, dtype=BF16)
    if op == "interleaved":
        c = torch.randn(128, device=device, dtype=BF16)
        f, args = lk.rms_norm_rope, (x, c, c)
    else:
        c, s = _split_freqs(2, 3, 2, 64, device)
        f, args = lk.rms_norm_split_rope, (x, c, s)
    # a 0-d tensor is refused: the memos key on the value, and reading it would sync
    with pytest.raises(TypeError, match="eps must be a real number, got Tensor"):
        f(*args, eps=torch.tensor(1e-6))
    with pytest.raises(TypeError, match="eps must be a real number, got NoneType"):
        f(*args, eps=None)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):  # an all-zero row: 0 / 0
        f(*args, eps=0.0)
    with pytest.raises(TypeError, match="out_fp8 must be a bool"):
        f(*args, out_fp8="no")
    torch.testing.assert_close(f(*args, out_fp8=np.True_, eps=np.float64(1e-6)).float(),
                               f(*args, out_fp8=True, eps=1e-6).float(), rtol=0, atol=0)


def test_split_zero_head_dim_is_refused(device):
    x, f = torch.randn(2, 3, 0, device=device, dtype=BF16), torch.randn(2, 4, 3, 0, device=device, dtype=BF16)
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match="Dh=0 .* must be even and >= 2"):
            lk.rms_norm_split_rope(x, f, f, backend=backend)


def test_split_triton_refuses_a_padded_row_past_its_registers():
    """H = 17, Dh = 1922: 32674 elements, but the kernel's tile is 32 x 1024 x 2 = 65536."""
    def padded(nh, dh):
        x, c = torch.zeros(1, 1, nh * dh, dtype=BF16), torch.zeros(1, nh, 1, dh // 2, dtype=BF16)
        return [r for r in norm_rope.split_op.why_not(x, c, c, None, False, 1e-6)["triton"] if "padded" in r]

    assert padded(17, 1922) and "padded to 65536" in padded(17, 1922)[0]
    assert not padded(32, 128) and not padded(16, 2048)  # LTX-2's heads; a 32768 tile exactly


def test_fp8_output_needs_sm89_on_the_triton_path(monkeypatch):
    """Triton stores e4m3 from sm_89 on: with out_fp8 the Triton backend asks for it (an A100 then
    takes the torch backend instead of failing to compile); bf16 output needs sm_80."""
    asked = []
    monkeypatch.setattr(norm_rope, "triton_reasons", lambda *t, min_arch: asked.append(min_arch) or [])
    x, c = torch.zeros(1, 2, 128, dtype=BF16), torch.zeros(1, 2, 2, 32, dtype=BF16)
    for op in (norm_rope.interleaved_op, norm_rope.split_op):
        freqs = c if op is norm_rope.split_op else torch.zeros(128, dtype=BF16)
        for out_fp8 in (True, False):
            op.backends["triton"].reasons(x, freqs, freqs, None, out_fp8, 1e-6)
    assert asked == [(8, 9), (8, 0), (8, 9), (8, 0)]
