"""Host (Python) cost of one eager call of each op (the GEMM at 4x256x4096), on tiny inputs so that the GPU
is never the bottleneck: what limits the eager GB/s of small calls. ``--profile`` adds a cProfile
of the interleaved norm+rope call.

    python tools/host_overhead.py [--profile]
"""
import argparse
import cProfile
import pstats
import time

import torch

import ltx_kernels as lk


def per_call_us(fn, n=3000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    dev = "cuda"
    bf = torch.bfloat16
    x = torch.randn(1, 4, 4096, device=dev, dtype=bf)
    c = torch.randn(1, 4, 4096, device=dev, dtype=bf)
    cs = torch.randn(1, 4, 32, 64, device=dev, dtype=bf).swapaxes(1, 2)
    w = torch.rand(4096, device=dev, dtype=bf)
    sc = torch.randn(1, 1, 4096, device=dev, dtype=bf)
    q, s = lk.quantize_blockwise(x)
    xr = x.clone()
    lg = torch.randn(1, 4, 32, device=dev, dtype=bf)
    u8 = torch.randint(0, 256, (4, 4096), device=dev, dtype=torch.uint8) & 0x9F
    p = lk.fp6_pack(u8)
    q2, s2 = lk.quantize_blockwise(x[0])
    qw, sw = lk.quantize_weights_blockwise(torch.randn(256, 4096, device=dev))
    bias = torch.randn(256, device=dev)
    cases = {
        "rms_norm_rope": lambda: lk.rms_norm_rope(x, c, c, w),
        "rms_norm_split_rope": lambda: lk.rms_norm_split_rope(x, cs, cs, w),
        "quantize_blockwise": lambda: lk.quantize_blockwise(x),
        "quantize_adanorm": lambda: lk.quantize_adanorm(x, sc, sc),
        "quantize_rms_fma": lambda: lk.quantize_rms_fma(xr, x, sc),
        "gated_attention": lambda: lk.gated_attention(x, lg),
        "dequantize_blockwise": lambda: lk.dequantize_blockwise(q, s),
        "fp6_pack": lambda: lk.fp6_pack(u8),
        "fp6_unpack": lambda: lk.fp6_unpack(p, 4096),
        "fp8_gemm_nt triton": lambda: lk.fp8_gemm_nt(q2, s2, qw, sw, bias, backend="triton"),
        "fp8_gemm_nt cuda": lambda: lk.fp8_gemm_nt(q2, s2, qw, sw, bias, backend="cuda"),
        "torch add (floor)": lambda: x + x,
    }
    for name, fn in cases.items():
        try:
            print(f"{name:24s} {per_call_us(fn):7.1f} us/call")
        except lk.BackendUnavailable as e:
            print(f"{name:24s} unavailable: {e}")
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(2000):
            cases["rms_norm_rope"]()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
