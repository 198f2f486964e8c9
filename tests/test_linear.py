"""BlockwiseFP8Linear / BlockwiseFP6Linear: upstream state-dict layout, inputs, compile."""
import numpy as np
import pytest
import torch
from torch import nn

import ltx_kernels as lk
from ltx_kernels import reference as ref

FP8 = torch.float8_e4m3fn
LAYERS = [lk.BlockwiseFP8Linear, lk.BlockwiseFP6Linear]


def _linear(device, k=256, n=384, bias=True):
    lin = nn.Linear(k, n, bias=bias, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.normal_(0, 0.05)
        if bias:
            lin.bias.normal_(0, 0.1)
    return lin


def _expected(layer, x):
    """Reference GEMM on the layer's own quantized operands."""
    q, s = ref.quantize_blockwise(x)
    w = layer.fp8weight
    y = ref.fp8_gemm_nt(q.reshape(-1, q.shape[-1]), s, w, layer.weight_scale, layer.bias)
    return y.view(*x.shape[:-1], w.shape[0])


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("bias", [True, False])
def test_from_linear_matches_reference_and_bf16(cls, bias, device):
    lin = _linear(device, bias=bias)
    layer = cls.from_linear(lin)
    assert layer.weight.device == lin.weight.device
    assert all(not p.requires_grad for p in layer.parameters())
    x = torch.randn(2, 5, 256, device=device, dtype=torch.bfloat16)
    y = layer(x)
    assert y.shape == (2, 5, 384) and y.dtype == torch.bfloat16
    want = _expected(layer, x)
    assert (y.float() - want.float()).abs().max() <= 1e-2 * want.float().abs().max()
    # vs the unquantized layer: FP8 codes carry 3 mantissa bits, FP6 codes 3 bits with 2-bit exponent
    dense = lin(x).float()
    rel = (y.float() - dense).norm() / dense.norm()
    assert rel < (0.05 if cls is lk.BlockwiseFP8Linear else 0.08), rel


@pytest.mark.parametrize("cls", LAYERS)
def test_state_dict_upstream_layout_round_trip(cls, device):
    src = cls.from_linear(_linear(device))
    sd = src.state_dict()
    assert set(sd) == {"weight", "weight_scale", "bias"}
    if cls is lk.BlockwiseFP8Linear:
        assert sd["weight"].dtype == FP8 and sd["weight"].shape == (384, 256)
    else:
        assert sd["weight"].dtype == torch.uint8 and sd["weight"].shape == (384, 192)
    assert sd["weight_scale"].dtype == torch.float32 and sd["weight_scale"].shape == (3, 2)
    assert sd["bias"].dtype == torch.float32 and sd["bias"].shape == (384,)
    dst = cls.from_linear(_linear(device), transform_weights=False)
    assert torch.equal(dst.weight_scale, torch.ones(3, 2, device=device))
    dst.load_state_dict(sd)
    x = torch.randn(7, 256, device=device, dtype=torch.bfloat16)
    assert torch.equal(dst(x), src(x))


@pytest.mark.parametrize("swap", [False, True], ids=["data", "swap_tensors"])
@pytest.mark.parametrize("cls", LAYERS)
def test_model_dtype_casts_keep_the_format(cls, swap, device, monkeypatch):
    """model.to(torch.float16) / .half() / .bfloat16() cast every floating-point parameter; the
    layer's FP8 codes, fp32 scales and fp32 bias keep their dtypes (and values), the rest of the
    model is cast (both of torch's ways of converting module parameters)."""
    monkeypatch.setattr(torch.__future__, "get_swap_module_params_on_conversion", lambda: swap)
    lin = nn.Linear(256, 384, device=device, dtype=torch.bfloat16)
    model = nn.Sequential(cls.from_linear(lin), nn.Linear(384, 8, device=device))
    before = {n: t.clone() for n, t in model[0].state_dict().items()}
    x = torch.randn(5, 256, device=device, dtype=torch.bfloat16)
    y0 = model[0](x)
    model.to(torch.float16).bfloat16().half()
    assert model[1].weight.dtype == torch.float16
    after = model[0].state_dict()
    for n, t in before.items():
        assert after[n].dtype == t.dtype and torch.equal(after[n].view(torch.uint8), t.view(torch.uint8)), n
    assert all(not p.requires_grad and isinstance(p, nn.Parameter) for p in model[0].parameters())
    assert torch.equal(model[0](x), y0)


def test_fp6_weight_codes_are_the_fp6_quantized_ones(device):
    lin = _linear(device)
    layer = lk.BlockwiseFP6Linear.from_linear(lin)
    q, s = ref.quantize_weights_blockwise(lin.weight, ref.FP6_SCALE_MAX)
    assert torch.equal(layer.fp8weight.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(layer.weight_scale, s)


@pytest.mark.parametrize("cls", LAYERS)
def test_tuple_input_and_leading_shapes(cls, device):
    layer = cls.from_linear(_linear(device))
    x = torch.randn(2, 3, 4, 256, device=device, dtype=torch.bfloat16)
    q, s = lk.quantize_blockwise(x)
    assert torch.equal(layer((q, s)), layer(x))
    assert torch.equal(layer((x, None)), layer(x))  # upstream's layers take a float input so too
    assert layer(x).shape == (2, 3, 4, 384)
    v = torch.randn(256, device=device, dtype=torch.bfloat16)
    assert layer(v).shape == (384,)
    assert layer(x.float()).dtype == torch.bfloat16  # fp32 input is quantized too
    xt = torch.randn(256, 6, device=device, dtype=torch.bfloat16).t()  # non-contiguous input
    assert torch.equal(layer(xt), layer(xt.contiguous()))


def test_bad_inputs(device):
    with pytest.raises(ValueError, match="in_features"):
        lk.BlockwiseFP8Linear(100, 128)
    with pytest.raises(ValueError, match="out_features"):
        lk.BlockwiseFP6Linear(128, 130)
    with pytest.raises(TypeError, match="nn.Linear"):
        lk.BlockwiseFP8Linear.from_linear(torch.zeros(3))
    with pytest.raises(TypeError, match="in_features must be an int, got float"):
        lk.BlockwiseFP8Linear(128.0, 128)
    assert lk.BlockwiseFP8Linear(np.int64(128), 128).in_features == 128
    with pytest.raises(ValueError, match="backend must be one of"):
        lk.BlockwiseFP8Linear(128, 128, backend="gpu")
    assert lk.BlockwiseFP8Linear(128, 128, backend=None).backend is None  # (LTX_KERNELS_BACKEND's default)
    with pytest.raises(TypeError, match="linear.weight must have dtype"):
        lk.BlockwiseFP8Linear.from_linear(nn.Linear(128, 128, dtype=torch.float64))
    # without transforming, only the linear's shape and device are read (ltx-core's meta load)
    assert lk.BlockwiseFP8Linear.from_linear(nn.Linear(128, 128, dtype=torch.float64), False).in_features == 128
    bad = nn.Linear(128, 128)
    with torch.no_grad():
        bad.weight[3, 5] = float("inf")
    for cls in LAYERS:
        with pytest.raises(ValueError, match="linear.weight holds 1 non-finite value"):
            cls.from_linear(bad)
    layer = lk.BlockwiseFP8Linear.from_linear(_linear(device))
    with pytest.raises(ValueError, match="in_features=256"):
        layer(torch.randn(3, 128, device=device))
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.ones(3, 256, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="pair"):
        layer((torch.zeros(3, 256, device=device).to(FP8),))


class _Block(nn.Module):
    """norm+rope -> quantized q projection, adanorm -> FP6 FFN-in, GELU quantize -> FP8 FFN-out."""

    def __init__(self, device, h=256, nh=2):
        super().__init__()
        self.q = lk.BlockwiseFP8Linear.from_linear(_linear(device, h, h))
        self.ff_in = lk.BlockwiseFP6Linear.from_linear(_linear(device, h, 2 * h))
        self.ff_out = lk.BlockwiseFP8Linear.from_linear(_linear(device, 2 * h, h))
        self.norm_w = nn.Parameter(torch.rand(h, device=device, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, x, cos, sin, scale, shift):
        q = lk.rms_norm_split_rope(self.q(x), cos, sin, self.norm_w)
        a = self.ff_in(lk.quantize_adanorm(x, scale, shift))
        g = self.ff_out(lk.quantize_blockwise(a, gelu=True))
        return q + g


def _block_inputs(device, b, t, nh=2, dh=128):
    bf = torch.bfloat16
    x = torch.randn(b, t, nh * dh, device=device, dtype=bf)
    cos = torch.randn(b, t, nh, dh // 2, device=device, dtype=bf).swapaxes(1, 2)  # ltx-core's swapaxes view
    sin = torch.randn(b, t, nh, dh // 2, device=device, dtype=bf).swapaxes(1, 2)
    scale = torch.randn(b, 1, nh * dh, device=device, dtype=bf) * 0.1
    shift = torch.randn(b, 1, nh * dh, device=device, dtype=bf) * 0.1
    return x, cos, sin, scale, shift


def _block_float64(blk, x, cos, sin, scale, shift):
    """The block in float64 with each layer's own (dequantized) weights and unquantized
    activations: an oracle independent of the package's kernels and reference."""
    def lin(layer, a):
        w = layer.fp8weight.double() * layer.weight_scale.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        return a @ w.t() + layer.bias.double()

    def rms(v):
        return v / (v.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()

    xd = x.double()
    b, t, h = x.shape
    nh = cos.shape[1]
    dh = h // nh
    y = (rms(lin(blk.q, xd)) * blk.norm_w.double()).view(b, t, nh, dh)
    c, s = cos.double().transpose(1, 2), sin.double().transpose(1, 2)
    y1, y2 = y[..., : dh // 2], y[..., dh // 2:]
    q = torch.cat((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1).view(b, t, h)
    a = lin(blk.ff_in, rms(xd) * (1 + scale.double()) + shift.double())
    gelu = 0.5 * a * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (a + 0.044715 * a.pow(3))))
    return q + lin(blk.ff_out, gelu)


def test_block_fullgraph_compile_against_float64(device):
    blk = _Block(device)
    args = _block_inputs(device, 1, 3)
    compiled = torch.compile(blk, fullgraph=True, backend="aot_eager")(*args)
    want = _block_float64(blk, *args)
    # FP8 activations (3 mantissa bits) between the layers: a few % of the output's norm
    rel = float((compiled.double() - want).norm() / want.norm())
    assert compiled.shape == want.shape and rel < 0.06, rel


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_block_compiled_and_cuda_graph_replay_on_gpu():
    device = torch.device("cuda")
    blk = _Block(device)
    args = _block_inputs(device, 2, 300)
    x = args[0]
    eager = blk(*args)
    compiled = torch.compile(blk, fullgraph=True)(*args)
    assert torch.equal(eager, compiled)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        blk(*args)  # warm: kernels compiled and configs chosen before capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = blk(*args)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, blk(*args))
