import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch
from ltx_kernels import reference as ref

from helpers import assert_codes_equal, assert_fp8_close, assert_rounded_close

BF16 = torch.bfloat16


def _check_layout(s, m, kb):
    a4 = (m + 3) // 4 * 4
    assert s.shape == (m, kb) and s.stride() == (1, a4) and s.dtype == torch.float32
    pad = s.as_strided((kb, a4), (a4, 1))[:, m:]
    assert torch.equal(pad, torch.zeros_like(pad)), "padding rows not initialised to 0"


@pytest.mark.parametrize("shape", [(1, 128), (7, 256), (2, 5, 384), (130, 1024), (3, 3, 2048)])
def test_quantize_codes_bit_exact(device, shape):
    x = torch.randn(shape, device=device, dtype=BF16) * 5
    q, s = lk.quantize_blockwise(x, backend="triton")
    qr, sr = ref.quantize_blockwise(x)
    assert_codes_equal(q, qr)
    assert torch.equal(s, sr)
    m = x.numel() // shape[-1]
    _check_layout(s, m, shape[-1] // 128)


def test_zero_blocks_saturation_subnormals(device):
    x = torch.randn(6, 512, device=device)
    x[1] = 0                                   # whole zero row
    x[2, 128:256] = 0                          # one zero block
    x[3, :128] = 1e-41                         # fp32 subnormals only
    x[4, 0] = 1e30                             # huge outlier
    x[5, :128] = torch.randn(128, device=device) * 1e-30
    q, s = lk.quantize_blockwise(x, backend="triton")
    assert torch.isfinite(q.float()).all() and torch.isfinite(s).all()
    assert (q[1].float() == 0).all() and (q[2, 128:256].float() == 0).all()
    assert_codes_equal(q, ref.quantize_blockwise(x)[0])
    assert q.float().abs().max() == 448
    # round trip is within one e4m3 step for the representable blocks
    deq = lk.dequantize_blockwise(q, s, out_dtype=torch.float32, backend="triton")
    assert_fp8_close((deq / s.repeat_interleave(128, 1)).to(torch.float8_e4m3fn),
                     x / s.repeat_interleave(128, 1))


def test_nan_is_ignored_by_the_block_absmax(device):
    x = torch.randn(3, 256, device=device)
    x[0, 5] = float("nan")       # one NaN in a block: scale from the other 127 values
    x[2, 128:] = float("nan")    # a whole NaN block: finite scale (the floor), NaN codes
    q, s = lk.quantize_blockwise(x, backend="triton")
    qr, sr = ref.quantize_blockwise(x)
    assert torch.equal(s, sr) and torch.isfinite(s).all()
    finite = ~x.isnan()
    assert_codes_equal(q[finite].view(1, -1), qr[finite].view(1, -1))
    assert q[~finite].float().isnan().all()
    # IEEE division on the CPU: CUDA's tensor / python-scalar multiplies by the reciprocal (1 ulp off)
    want = x[0, :128].cpu().nan_to_num(0).abs().max() / 448
    torch.testing.assert_close(s[0, 0].cpu(), want, rtol=0, atol=0)


def test_scale_max_and_fp6_range(device):
    x = torch.randn(4, 256, device=device)
    q, s = lk.quantize_blockwise(x, scale_max=lk.FP6_SCALE_MAX, backend="triton")
    assert_codes_equal(q, ref.quantize_blockwise(x, lk.FP6_SCALE_MAX)[0])
    lk.fp6_check(q)


def test_gelu_variant(device):
    x = torch.randn(3, 256, device=device, dtype=BF16) * 3
    q, s = lk.quantize_blockwise(x, gelu=True, backend="triton")
    g = ref.gelu_tanh(x.float())
    qr, sr = ref.quantize_blockwise(x, gelu=True)
    torch.testing.assert_close(s, sr, rtol=1e-5, atol=0)
    assert_fp8_close(q, g / sr.repeat_interleave(128, 1))


@pytest.mark.parametrize("n,k", [(128, 128), (256, 384)])
def test_weights_bit_exact_and_scale_is_amax_over_max(device, n, k):
    w = torch.randn(n, k, device=device, dtype=BF16)
    w[:128, :128] = 0
    q, s = lk.quantize_weights_blockwise(w, backend="triton")
    qr, sr = ref.quantize_weights_blockwise(w)
    assert_codes_equal(q, qr)
    assert torch.equal(s, sr) and s.shape == (n // 128, k // 128) and s.is_contiguous()
    amax = w.float().abs().view(n // 128, 128, k // 128, 128).amax(dim=(1, 3))
    want = (amax.cpu() / torch.tensor(448.0)).to(device)  # IEEE division (CUDA's tensor/scalar multiplies by 1/x)
    assert torch.equal(s[amax > 0], want[amax > 0])
    assert (q[:128, :128].float() == 0).all() and torch.isfinite(s).all()


def test_dequantize_both_layouts_and_strided_scales(device):
    x = torch.randn(9, 256, device=device)
    q, s = lk.quantize_blockwise(x)
    out = lk.dequantize_blockwise(q, s, backend="triton")
    assert torch.equal(out, ref.dequantize_blockwise(q, s))
    s_rowmajor = s.contiguous()  # any strides are honoured
    assert torch.equal(lk.dequantize_blockwise(q, s_rowmajor, backend="triton"), out)
    w = torch.randn(256, 384, device=device)
    qw, sw = lk.quantize_weights_blockwise(w)
    assert torch.equal(lk.dequantize_blockwise(qw, sw, backend="triton"), ref.dequantize_blockwise(qw, sw))


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("b,t", [(1, 5), (2, 3), (3, 9)])
def test_adanorm(device, per_token, b, t):
    h = 512
    x = torch.randn(b, t, h, device=device, dtype=BF16) * 3
    mod_shape = (b, t, h) if per_token else (b, 1, h)
    scale = torch.randn(mod_shape, device=device, dtype=BF16) * 0.3
    shift = torch.randn(mod_shape, device=device, dtype=BF16) * 0.3
    x[0, 0] = 0  # zero row: finite
    q, s = lk.quantize_adanorm(x, scale, shift, backend="triton")
    u = ref.rms_norm(x.float(), 1e-6) * (1 + scale.float()) + shift.float()
    qr, sr = ref.quantize_adanorm(x, scale, shift)
    torch.testing.assert_close(s, sr, rtol=1e-5, atol=0)
    assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
    _check_layout(s, b * t, h // 128)


_BCAST = [{"KIND": "bcast", "ROWS": 4, "BLOCK_M": 1}, {"KIND": "bcast", "ROWS": 8, "BLOCK_M": 4},
          {"KIND": "bcast", "ROWS": 16, "BLOCK_M": 2}]
_TWOPASS = [{"KIND": "twopass", "BLOCK_M": 2, "CHUNK_KB": 1}, {"KIND": "twopass", "BLOCK_M": 4, "CHUNK_KB": 4}]


# The shared-modulation ("bcast") kernel takes [B, 1, h] modulation only: per-token modulation
# runs on the two-pass kernels.
@pytest.mark.parametrize("cfg,per_token", [(c, False) for c in _BCAST + _TWOPASS] + [(c, True) for c in _TWOPASS])
@pytest.mark.parametrize("b,t", [(1, 5), (3, 9)])
def test_adanorm_kernel_variants(device, cfg, per_token, b, t):
    from ltx_kernels import _checks as chk
    from ltx_kernels.triton import prepare

    prepare()
    from ltx_kernels.triton import quantize as kq

    h = 384
    x = torch.randn(b, t, h, device=device, dtype=BF16) * 3
    x[0, 0] = 0  # a zero row: finite scales, zero codes
    mod_shape = (b, t, h) if per_token else (b, 1, h)
    scale = torch.randn(mod_shape, device=device, dtype=BF16) * 0.3
    shift = torch.randn(mod_shape, device=device, dtype=BF16) * 0.3
    m = b * t
    q = torch.empty(b, t, h, device=device, dtype=torch.float8_e4m3fn)
    sbuf = kq.scale_buffer(m, h // 128, device)
    leading = x.shape[:-1]
    kq.quantize_adanorm(x.view(m, h), chk.two_level_rows(scale, leading), chk.two_level_rows(shift, leading),
                        q.view(m, h), sbuf, 1e-6, 448.0, cfg=dict(cfg, num_warps=4))
    s = sbuf.t()[:m]
    qr, sr = ref.quantize_adanorm(x, scale, shift)
    torch.testing.assert_close(s, sr, rtol=1e-5, atol=0)
    u = ref.rms_norm(x.float(), 1e-6) * (1 + scale.float()) + shift.float()
    assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
    _check_layout(s, m, h // 128)


def test_adanorm_shared_modulation_needs_a_grid_row_a_sample():
    """The shared-modulation kernel runs one grid row per sample: more samples than CUDA's grid y
    limit take the per-row kernels (a [65536, 1, h] input with [65536, 1, h] modulation)."""
    from ltx_kernels.triton import quantize as kq

    shared = (None, 1, 128, 0)  # one token a sample, scale / shift rows 128 apart: shared per sample
    assert kq.shared_modulation(kq.MAX_GRID_Y, shared, shared)
    assert not kq.shared_modulation(kq.MAX_GRID_Y + 1, shared, shared)
    per_token = (None, 4, 512, 128)
    assert not kq.shared_modulation(8, per_token, per_token)
    assert not kq.shared_modulation(6, (None, 4, 128, 0), (None, 4, 128, 0))  # not whole samples


@pytest.mark.parametrize("inplace", [True, False])
def test_rms_fma(device, inplace):
    b, t, h = 2, 3, 256
    x = torch.randn(b, t, h, device=device, dtype=BF16)
    y = torch.randn(b, t, h, device=device, dtype=BF16)
    gate = torch.randn(b, 1, h, device=device, dtype=BF16)
    x0 = x.clone()
    q, s, r = lk.quantize_rms_fma(x, y, gate, inplace=inplace, backend="triton")
    r_want = (x0.float() + y.float() * gate.float())
    assert_rounded_close(r, r_want)
    if inplace:
        assert r.data_ptr() == x.data_ptr()
    else:
        assert torch.equal(x, x0)
    u = ref.rms_norm(r.float(), 1e-6)
    assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))


@pytest.mark.parametrize("h,nh", [(384, 2), (384, 3), (384, 4), (1024, 16)])
def test_gated_attention(device, h, nh):
    x = torch.randn(2, 3, h, device=device, dtype=BF16)
    logits = torch.randn(2, 3, nh, device=device, dtype=BF16) * 3
    q, s = lk.gated_attention(x, logits, backend="triton")
    u = (x.float().view(2, 3, nh, -1) * 2 * torch.sigmoid(logits.float())[..., None]).view(2, 3, h)
    assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
    out, none = lk.gated_attention(x, logits, quantize=False, backend="triton")
    assert none is None and out.dtype == BF16
    assert_rounded_close(out, u)


def test_many_rows_and_empty(device):
    x = torch.randn(0, 256, device=device)
    q, s = lk.quantize_blockwise(x, backend="triton")
    assert q.shape == (0, 256) and s.shape == (0, 2)


def test_bad_inputs(device):
    with pytest.raises(ValueError, match="multiple of 128"):
        lk.quantize_blockwise(torch.randn(2, 100))
    with pytest.raises(TypeError, match="dtype"):
        lk.quantize_blockwise(torch.randn(2, 128).to(torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="scale_max"):
        lk.quantize_blockwise(torch.randn(2, 128), scale_max=0)
    with pytest.raises(ValueError, match="multiple of 128"):
        lk.quantize_weights_blockwise(torch.randn(100, 128))
    with pytest.raises(ValueError, match="broadcast"):
        lk.quantize_adanorm(torch.randn(2, 3, 128), torch.randn(3, 3, 128), torch.randn(2, 1, 128))
    with pytest.raises(ValueError, match="y must have"):
        lk.quantize_rms_fma(torch.randn(2, 3, 128), torch.randn(2, 2, 128), torch.randn(2, 1, 128))
    with pytest.raises(ValueError, match="must divide"):
        lk.gated_attention(torch.randn(2, 3, 128), torch.randn(2, 3, 3))
    q, s = lk.quantize_blockwise(torch.randn(4, 256))
    with pytest.raises(ValueError, match="scales must be"):
        lk.dequantize_blockwise(q, s[:3])


def test_explicit_config_launch_path(device):
    """The launchers the warmup tunes through (an explicit config, no cache lookup) give the
    same results as the dispatched ops."""
    from ltx_kernels.triton import prepare

    prepare()
    from ltx_kernels.triton import quantize as kq

    m, k, nh = 6, 256, 2
    x = torch.randn(m, k, device=device, dtype=BF16)
    lg = torch.randn(m, nh, device=device, dtype=BF16)
    cfg = {"BLOCK_M": 4, "BLOCK_KB": 1, "num_warps": 4}
    for run, want, exact in (
        (lambda q, s: kq.quantize(x, q, s, 448.0, False, cfg=cfg), lk.quantize_blockwise(x, backend="torch"), True),
        (lambda q, s: kq.gated_attention(x, lg, q, s, nh, 448.0, True, cfg=cfg),
         lk.gated_attention(x, lg, backend="torch"), False),
    ):
        q = torch.empty(m, k, device=device, dtype=torch.float8_e4m3fn)
        s = kq.scale_buffer(m, k // 128, device)
        run(q, s)
        torch.testing.assert_close(s.t()[:m], want[1], rtol=1e-5, atol=0)
        if exact:
            assert_codes_equal(q, want[0])
        else:
            assert_fp8_close(q, want[0].float())


def test_repeat_calls_same_signature(device):
    """Fresh inputs of one signature, call after call, for every planned producer: on a GPU the
    second call onwards takes the per-signature plan (direct launch), which must give the same
    results (quantize_rms_fma's residual in place or not); an x whose rows need a copy must not
    be planned."""
    from ltx_kernels import quantize

    b, t, h = 2, 5, 384
    for i in range(6):
        x = torch.randn(b, t, h, device=device, dtype=BF16) * 3
        xs = torch.randn(b, t, 2 * h, device=device, dtype=BF16)[..., ::2]  # rows need a copy
        for xx in (x, xs):
            q, s = lk.quantize_blockwise(xx, backend="triton")
            qr, sr = ref.quantize_blockwise(xx)
            assert_codes_equal(q, qr)
            assert torch.equal(s, sr)
        scale = torch.randn(b, 1, h, device=device, dtype=BF16) * 0.3
        shift = torch.randn(b, t, h, device=device, dtype=BF16) * 0.3
        q, s = lk.quantize_adanorm(x, scale, shift, backend="triton")
        qr, sr = ref.quantize_adanorm(x, scale, shift)
        torch.testing.assert_close(s, sr, rtol=1e-5, atol=0)
        u = ref.rms_norm(x.float(), 1e-6) * (1 + scale.float()) + shift.float()
        assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
        for inplace in (True, False):
            xr, y = x.clone(), torch.randn(b, t, h, device=device, dtype=BF16)
            q, s, r = lk.quantize_rms_fma(xr, y, scale, inplace=inplace, backend="triton")
            assert_rounded_close(r, x.float() + y.float() * scale.float())
            assert (r.data_ptr() == xr.data_ptr()) == inplace
            if not inplace:
                assert torch.equal(xr, x)
            u = ref.rms_norm(r.float(), 1e-6)
            assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
        logits = torch.randn(b, t, 3, device=device, dtype=BF16) * 3
        u = (x.float().view(b, t, 3, -1) * 2 * torch.sigmoid(logits.float())[..., None]).view(b, t, h)
        q, s = lk.gated_attention(x, logits, backend="triton")
        assert_fp8_close(q, (u.view(-1, h) / s.repeat_interleave(128, 1)).view(q.shape))
        out, none = lk.gated_attention(x, logits, quantize=False, backend="triton")
        assert none is None and out.dtype == BF16
        assert_rounded_close(out, u)
    if device.type == "cuda":
        gen = quantize.tuning.generation
        assert quantize._plans.get(_dispatch.signature(("gated", x, logits, False, quantize.FP8_SCALE_MAX,
                                                       "triton", gen)))
        assert quantize._plans.get(_dispatch.signature(("quantize", x, quantize.FP8_SCALE_MAX, False, "triton", gen)))
        assert not quantize._plans.get(_dispatch.signature(("quantize", xs, quantize.FP8_SCALE_MAX, False, "triton",
                                                           gen))), "a plan kept for rows that needed a copy"


def test_dequantize_repeat_calls_same_signature(device):
    """dequantize_blockwise call after call with fresh inputs of one signature (planned on a GPU
    from the second call), both scale layouts, against the plain product."""
    from ltx_kernels import quantize

    for _ in range(4):
        x = torch.randn(3, 7, 256, device=device, dtype=BF16) * 5
        q, s = lk.quantize_blockwise(x)
        want = q.float().view(21, 2, 128) * s.view(21, 2, 1)
        assert torch.equal(lk.dequantize_blockwise(q, s).float(), want.view(3, 7, 256).to(BF16).float())
        w = torch.randn(256, 384, device=device)
        qw, sw = lk.quantize_weights_blockwise(w)
        want_w = qw.float().view(2, 128, 3, 128) * sw.view(2, 1, 3, 1)
        assert torch.equal(lk.dequantize_blockwise(qw, sw, out_dtype=torch.float32), want_w.view(256, 384))
    if device.type == "cuda":
        gen = quantize.tuning.generation
        assert quantize._plans.get(_dispatch.signature(("dequantize", q, s, BF16, "auto", gen)))


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("h,nh", [(64, 1), (96, 1), (100, 4), (160, 2), (320, 4), (2, 2)])
def test_gated_attention_unquantized_any_width(device, backend, h, nh):
    """Without quantization the row need not hold whole 128-blocks: every column is gated."""
    x = torch.randn(2, 3, h, device=device, dtype=BF16)
    logits = torch.randn(2, 3, nh, device=device, dtype=BF16) * 3
    out, none = lk.gated_attention(x, logits, quantize=False, backend=backend)
    gate = 2.0 / (1.0 + torch.exp(-logits.double()))
    want = (x.double().view(2, 3, nh, -1) * gate[..., None]).view(2, 3, h)
    assert none is None and out.dtype == BF16
    assert_rounded_close(out, want.float())
    with pytest.raises(ValueError, match="x's last dim must be a positive multiple of 128"):
        lk.gated_attention(x, logits, backend=backend)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, in the interpreter
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("big", [2e19, 1e30, 3e38])
def test_norm_producers_huge_rows(device, backend, big):
    """Rows whose sum of squares overflows fp32 are still normalised (float64 oracle)."""
    h = 256
    x = torch.randn(3, h, device=device, dtype=torch.float32)
    x[1] = x[1].clamp(-1, 1) * big   # |x| up to `big`: x*x and the row sum overflow fp32
    x[2, 7] = big                    # one huge element in an otherwise ordinary row
    xd = x.double()
    y = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    zero = torch.zeros(1, h, device=device)
    q, s = lk.quantize_adanorm(x, zero, zero, backend=backend)
    assert torch.isfinite(s).all() and (s > 0).all()
    assert_fp8_close(q, (y / s.double().repeat_interleave(128, 1)).float())
    xr = x.clone()
    q, s, r = lk.quantize_rms_fma(xr, torch.zeros_like(x), zero, backend=backend)
    assert torch.equal(r, x)
    assert_fp8_close(q, (y / s.double().repeat_interleave(128, 1)).float())


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, in the interpreter
@pytest.mark.parametrize("cfg", [{"BLOCK_M": 2}, {"KIND": "bcast", "ROWS": 4, "BLOCK_M": 2},
                                 {"KIND": "twopass", "BLOCK_M": 2, "CHUNK_KB": 1}])
def test_adanorm_kernel_variants_huge_rows(device, cfg):
    """Every adanorm kernel rescales a row whose sum of squares overflows, and only that row."""
    from ltx_kernels import _checks as chk
    from ltx_kernels.triton import prepare

    prepare()
    from ltx_kernels.triton import quantize as kq

    b, t, h = 2, 3, 384
    x = torch.randn(b, t, h, device=device)
    x[0, 1] *= 1e30
    x[1, 2, 300] = 3e38
    scale = torch.randn(b, 1, h, device=device) * 0.3
    shift = torch.randn(b, 1, h, device=device) * 0.3
    m = b * t
    q = torch.empty(b, t, h, device=device, dtype=torch.float8_e4m3fn)
    sbuf = kq.scale_buffer(m, h // 128, device)
    kq.quantize_adanorm(x.view(m, h), chk.two_level_rows(scale, x.shape[:-1]), chk.two_level_rows(shift, x.shape[:-1]),
                        q.view(m, h), sbuf, 1e-6, 448.0, cfg=dict(cfg, num_warps=4))
    s = sbuf.t()[:m]
    xd = x.double()
    u = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * (1 + scale.double()) + shift.double()
    u = u.view(m, h)
    want_s = u.abs().view(m, h // 128, 128).amax(-1) / 448
    torch.testing.assert_close(s.double(), want_s, rtol=1e-5, atol=0)
    assert_fp8_close(q.view(m, h), (u / s.double().repeat_interleave(128, 1)).float())


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_zero_width_rows(device, backend):
    """Rows of width 0 (dequantize: any K; unquantized gated_attention: heads of width 0) give
    empty outputs of the right shape."""
    q = torch.zeros(2, 3, 0, device=device).to(torch.float8_e4m3fn)
    for scales in (torch.zeros(6, 0, device=device), torch.zeros(1, 0, device=device)):
        out = lk.dequantize_blockwise(q, scales, backend=backend)
        assert out.shape == (2, 3, 0) and out.dtype == BF16
    with pytest.raises(ValueError, match="scales must be"):
        lk.dequantize_blockwise(q, torch.zeros(2, 0, device=device), backend=backend)
    out, none = lk.gated_attention(torch.zeros(4, 0, device=device), torch.zeros(4, 2, device=device),
                                   quantize=False, backend=backend)
    assert out.shape == (4, 0) and none is None


def test_wrappers_turn_a_plans_buffer_into_the_scales_view(monkeypatch):
    """A plan returns what the custom op returns, (codes, scale buffer [K/128, A4(M)]) (an empty
    stand-in when gated_attention does not quantize); the public wrappers hand back the scales
    [M, K/128] view (or None). Plans are recorded on GPUs only, so one is injected here."""
    from ltx_kernels import quantize

    x = torch.randn(2, 5, 256, dtype=BF16)
    logits = torch.randn(2, 5, 2, dtype=BF16)
    qr, sr = ref.quantize_blockwise(x)
    plans = quantize.Plans()
    gen = quantize.tuning.generation
    key = _dispatch.signature(("quantize", x, quantize.FP8_SCALE_MAX, False, "torch", gen))
    plans._memo.put(key, lambda x: (qr, quantize._as_buffer(sr)))
    gkey = _dispatch.signature(("gated", x, logits, False, quantize.FP8_SCALE_MAX, "torch", gen))
    plans._memo.put(gkey, lambda x, lg: (x + 1, quantize._NO_SCALES(x)))
    monkeypatch.setattr(quantize, "_plans", plans)
    q, s = lk.quantize_blockwise(x, backend="torch")
    out, none = lk.gated_attention(x, logits, quantize=False, backend="torch")
    assert_codes_equal(q, qr)
    assert torch.equal(s, sr)
    _check_layout(s, 10, 2)
    assert torch.equal(out, x + 1) and none is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans are offered by the CUDA launchers")
def test_compiled_producers_take_their_plans():
    """The quantize producers inside a compiled graph: from the second call the ops registered with
    torch.library run the plans recorded for their signatures; results equal eager's, call after
    call, fresh inputs each time (residual written in place too)."""
    from ltx_kernels import quantize

    b, t, h, nh = 1, 96, 512, 4
    FP8 = torch.float8_e4m3fn

    def chain(x, y, scale, shift, gate, logits):
        q1, s1 = lk.quantize_blockwise(x, gelu=True)
        q2, s2 = lk.quantize_adanorm(x, scale, shift)
        g, gs = lk.gated_attention(y, logits)
        u, none = lk.gated_attention(y, logits, quantize=False)
        q3, s3, r = lk.quantize_rms_fma(x, y, gate)
        return q1, s1, q2, s2, g, gs, u, q3, s3, r

    compiled = torch.compile(chain, fullgraph=True)
    for _ in range(3):
        args = [torch.randn(b, t, h, device="cuda", dtype=BF16), torch.randn(b, t, h, device="cuda", dtype=BF16),
                torch.randn(b, 1, h, device="cuda", dtype=BF16) * 0.3, torch.randn(b, t, h, device="cuda", dtype=BF16),
                torch.randn(b, 1, h, device="cuda", dtype=BF16), torch.randn(b, t, nh, device="cuda", dtype=BF16)]
        eager_args = [a.clone() for a in args]
        got, want = compiled(*args), chain(*eager_args)
        for g_, w_ in zip(got, want):
            assert torch.equal(g_.view(torch.uint8) if g_.dtype == FP8 else g_, w_.view(torch.uint8)
                               if w_.dtype == FP8 else w_)
        assert torch.equal(args[0], eager_args[0]), "the residual written in place differs"
    gen = quantize.tuning.generation
    x, y, scale, shift, gate, logits = args
    assert quantize._plans.get(_dispatch.signature(("quantize", x, quantize.FP8_SCALE_MAX, True, "auto", gen)))
    assert quantize._plans.get(_dispatch.signature(("gated", y, logits, True, quantize.FP8_SCALE_MAX, "auto", gen)))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_scale_max_range(device, backend):
    x = torch.randn(2, 256, device=device)
    x[0, :128] = 0  # an all-zero block: scale_max / AMAX_FLOOR must stay finite
    for bad in (1e10, 2.0 ** 32, 1e-45, 0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale_max must be in"):
            lk.quantize_blockwise(x, scale_max=bad, backend=backend)
    with pytest.raises(TypeError, match="scale_max must be a real number, got Tensor"):
        lk.quantize_blockwise(x, scale_max=torch.tensor(448.0), backend=backend)
    with pytest.raises(TypeError, match="gelu must be a bool"):
        lk.quantize_blockwise(x, gelu="no", backend=backend)
    for ok in (2.0 ** -9, lk.FP6_SCALE_MAX, 1000.0, 2.0 ** 16):  # past 448 the codes saturate
        q, s = lk.quantize_blockwise(x, scale_max=ok, backend=backend)
        assert not q.float().isnan().any() and s.isfinite().all()
        assert (q[0, :128].float() == 0).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_rms_fma_in_place_refuses_what_it_would_corrupt(device, backend):
    y, g = torch.randn(4, 256, device=device), torch.randn(256, device=device)
    with pytest.raises(ValueError, match="x is a broadcast view"):
        lk.quantize_rms_fma(torch.randn(1, 256, device=device).expand(4, 256), y, g, backend=backend)
    lk.quantize_rms_fma(torch.randn(1, 256, device=device).expand(4, 256), y, g, inplace=False, backend=backend)
    # a tensor that requires grad is updated in place as any other (ltx-core's blocks run with grad
    # mode on unless the caller turns it off; the ops record no history, as upstream's)
    leaf = torch.randn(4, 256, device=device, requires_grad=True)
    before = leaf.detach().clone()
    _, _, r = lk.quantize_rms_fma(leaf, y, g, backend=backend)
    assert r is leaf and not torch.equal(leaf.detach(), before)
    with pytest.raises(TypeError, match="inplace must be a bool"):
        lk.quantize_rms_fma(before, y, g, inplace="no", backend=backend)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_eps_zero_is_refused(device, backend):
    x, mod = torch.zeros(2, 128, device=device), torch.zeros(128, device=device)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        lk.quantize_adanorm(x, mod, mod, eps=0, backend=backend)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        lk.quantize_rms_fma(x, x, mod, eps=0.0, backend=backend)


def test_gelu_negative_tail_matches_float64(device):
    """The blocks of GELU's negative tail (x < -4.5, GELU ~ -1e-5 .. -1e-7): 1 + tanh(z) would
    cancel to nothing in fp32; both backends keep the values to e4m3 rounding."""
    import oracle

    x = torch.linspace(-6.0, -4.5, 256, device=device).view(2, 128)
    want = oracle.gelu_tanh(x.double())
    for backend in ("torch", "triton"):
        q, s = lk.quantize_blockwise(x, gelu=True, backend=backend)
        got = q.double() * s.double().repeat_interleave(128, 1)
        assert ((got - want).abs() <= want.abs() * 2.0 ** -4).all(), backend  # e4m3: 3 mantissa bits


def test_upstream_names_check_their_arguments(device):
    from ltx_kernels.blockwise import functional as F
    from ltx_kernels.blockwise import triton_ops as T

    x = torch.randn(2, 256, device=device)
    with pytest.raises(TypeError, match="x must have dtype"):
        F.gated_attention_triton(torch.ones(2, 256, dtype=torch.int32, device=device), torch.randn(2, 2), False)
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        T.rms_fma_triton(x, None, torch.randn(256, device=device))
    with pytest.raises(ValueError, match="y must have x's shape"):
        T.rms_fma_triton(x, torch.randn(3, 256, device=device), torch.randn(256, device=device))
    with pytest.raises(ValueError, match="z of shape"):
        T.rms_fma_triton(x, x.clone(), torch.randn(3, 256, device=device))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        T.rowwise_int_quantize_triton(None)
    q, s = T.rowwise_int_quantize_triton(torch.randn(4, 0, device=device))
    assert q.shape == (4, 0) and torch.equal(s, torch.ones(4, device=device))
    y = torch.randn(2, 4, device=device)
    y[0, 0] = float("nan")
    q, s = T.rowwise_int_quantize_triton(y)  # NaN leaves its row's scale to the other values
    assert torch.equal(s[0], y[0, 1:].abs().amax() / 127) and q[0, 0] == 0


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_adanorm_infinite_scale_where_the_norm_underflows(device, backend):
    """A row 1e76 times larger in one place than elsewhere: the normalised values there are 0 in
    fp32, so an infinite (1 + scale) on them gives NaN (ignored by the absmax), not inf (which
    would zero the block). Found by the property test under the gpu profile."""
    import oracle

    x = torch.full((1, 1, 128), 1e-38, device=device).to(BF16)
    x[0, 0, 5] = 3e38
    scale, shift = torch.randn(1, 1, 128, device=device).to(BF16), torch.randn(1, 1, 128, device=device).to(BF16)
    scale[0, 0, 13] = float("inf")
    q, s = lk.quantize_adanorm(x, scale, shift, backend=backend)
    oracle.assert_quantized(q, s, oracle.adanorm_u(x, scale, shift, 1e-6), 448.0, "adanorm")
    assert q[0, 0, 13].float().isnan() and s.isfinite().all()
