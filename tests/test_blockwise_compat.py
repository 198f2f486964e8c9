"""The upstream import surface (ltx_kernels.blockwise) maps onto the package's ops."""
import pytest
import torch

from ltx_kernels import blockwise
from ltx_kernels import reference as ref
from ltx_kernels.blockwise import functional, triton_ops


def test_names_and_results(device):
    x = torch.randn(2, 3, 256, device=device, dtype=torch.bfloat16)
    q, s = triton_ops.blockwise_quantize_triton(x)
    qr, sr = ref.quantize_blockwise(x)
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and torch.equal(s, sr)
    qt, st = functional.blockwise_quantize_torch(x)
    assert st.shape == (2, 6) and st.is_contiguous() and torch.equal(st, sr.t())
    assert triton_ops.get_tma_aligned_size(5, 4) == 8
    w = torch.randn(256, 128, device=device)
    qw, sw = blockwise.fp6_blockwise_quantize_weights_torch(w)
    p = blockwise.fp6_pack_tensor(qw.view(torch.uint8))
    assert torch.equal(blockwise.fp6_unpack_tensor(p, 128), qw.view(torch.uint8))
    assert torch.equal(blockwise.blockwise_dequantize((q, s)), ref.dequantize_blockwise(q, s))
    sc = torch.zeros(2, 1, 256, device=device, dtype=torch.bfloat16)
    qa, sa = blockwise.blockwise_quantize_adanorm_triton(x, None, sc, sc, torch.float8_e4m3fn, 1.0)
    assert qa.shape == x.shape and sa.shape == (6, 2)
    xr = x.clone()
    blockwise.blockwise_quantize_rms_fma_triton(xr, x, sc + 1)
    assert torch.equal(xr, (x.float() * 2).to(torch.bfloat16))
    assert blockwise.FP6_SCALE_MAX == 0.1172 and blockwise.rms_norm_split_rope is not None


def test_remaining_upstream_names(device):
    from ltx_kernels.blockwise import arch, linear

    x = torch.randn(3, 256, device=device, dtype=torch.bfloat16)
    y = torch.randn(3, 256, device=device, dtype=torch.bfloat16)
    g = torch.rand(1, 256, device=device, dtype=torch.bfloat16)
    xr = x.clone()
    out = triton_ops.rms_fma_triton(xr, y, g)
    r = (x.float() + y.float() * g.float()).to(torch.bfloat16)
    assert torch.equal(xr, r) and torch.equal(out, ref.rms_norm(r.float(), 1e-6).to(torch.bfloat16))
    q, s = triton_ops.rowwise_int_quantize_triton(torch.tensor([[1.0, -2.54, 0.0], [0.0, 0.0, 0.0]]))
    assert q.dtype == torch.int8 and q[0].tolist() == [50, -127, 0] and q[1].tolist() == [0, 0, 0]
    assert torch.allclose(s, torch.tensor([2.54 / 127, 1.0]))
    lin = torch.nn.Linear(256, 128, device=device)
    layer = linear.BlockwiseLinear.from_linear(lin)
    assert torch.equal(linear.BlockwiseGemmLinearFunc.apply(x, layer.weight, layer.weight_scale, layer.bias), layer(x))
    if torch.cuda.is_available():
        assert arch.get_device_arch() in ("ampere", "ada", "hopper", "blackwell")
    else:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            arch.get_device_arch()


def test_dequantize_needs_a_pair(device):
    q, s = triton_ops.blockwise_quantize_triton(torch.randn(2, 256, device=device))
    for bad in (q, q[:1], (q,), (q, s, s), None):
        with pytest.raises(TypeError, match=r"xs must be a \(q, scales\) pair"):
            blockwise.blockwise_dequantize(bad)
    assert torch.equal(blockwise.blockwise_dequantize([q, s]), blockwise.blockwise_dequantize((q, s)))
