"""Calls on a CUDA device that is not the current one (a model on cuda:1 while cuda:0 is current):
Triton launches on the current device unless told otherwise, so each op must make its tensors'
device current. Needs two GPUs; the guard logic itself is tested on CPU in test_dispatch.py."""
import pytest
import torch

import ltx_kernels as lk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two CUDA devices")


def _calls(dev):
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(device=dev, dtype=dtype)

    x, c, s = r(2, 64, 512), r(2, 4, 64, 64), r(2, 4, 64, 64)
    ci, si = r(2, 64, 512), r(2, 64, 512)
    a, sa = lk.quantize_blockwise(r(300, 512))
    b, sb = lk.quantize_weights_blockwise(r(256, 512))
    codes = torch.randint(0, 256, (64, 128), generator=g, dtype=torch.uint8).to(dev)
    mod, b_hi, logits = r(2, 1, 512), r(256, 512), r(2, 64, 4)
    return {
        "rms_norm_rope": lambda: lk.rms_norm_rope(x, ci, si, backend="triton"),
        "rms_norm_split_rope": lambda: lk.rms_norm_split_rope(x, c, s, out_fp8=True, backend="triton"),
        "quantize_blockwise": lambda: lk.quantize_blockwise(x, backend="triton"),
        "quantize_weights_blockwise": lambda: lk.quantize_weights_blockwise(b_hi, backend="triton"),
        "dequantize_blockwise": lambda: lk.dequantize_blockwise(a, sa, backend="triton"),
        "fp6_pack": lambda: lk.fp6_pack(codes, backend="triton"),
        "fp6_unpack": lambda: lk.fp6_unpack(lk.fp6_pack(codes, backend="torch"), 128, backend="triton"),
        "quantize_adanorm": lambda: lk.quantize_adanorm(x, mod, mod, backend="triton"),
        "quantize_rms_fma": lambda: lk.quantize_rms_fma(x.clone(), x, mod, backend="triton"),  # updates its x
        "gated_attention": lambda: lk.gated_attention(x, logits, backend="triton"),
        "fp8_gemm_nt triton": lambda: lk.fp8_gemm_nt(a, sa, b, sb, backend="triton"),
        "fp8_gemm_nt auto": lambda: lk.fp8_gemm_nt(a, sa, b, sb),
    }


def _flat(out):
    return [t.float().cpu() for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name", list(_calls("cpu")) if torch.cuda.device_count() >= 2 else ["none"])
def test_op_on_a_device_that_is_not_current(name):
    torch.cuda.set_device(0)
    want = _flat(_calls("cuda:0")[name]())
    call = _calls("cuda:1")[name]
    for _ in range(3):  # the first call, then the eager plan's direct launches
        got = _flat(call())
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 0
        for w, o in zip(want, got):
            assert torch.equal(w, o), name
