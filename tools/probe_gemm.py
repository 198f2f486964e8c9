"""Time chosen Triton GEMM variants directly (no tuner) at a few LTX-2 shapes, next to cuBLAS
blockwise ``_scaled_mm``: a quick look before a full warmup. Prints one line per (shape, config),
flushed, so a compiler crash still leaves the lines before it.

    python tools/probe_gemm.py
"""
import sys

import torch
import triton.testing

import ltx_kernels as lk
from ltx_kernels import reference as ref
from ltx_kernels.triton import fp8_gemm as kg

SHAPES = [(16384, 4096, 4096), (4096, 4096, 4096), (1024, 4096, 4096), (3000, 2176, 7168)]
BASE = {"GROUP_M": 8, "USE_TMA": True}
CONFIGS = [
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3),
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4),
    dict(BASE, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
    dict(BASE, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4),
    dict(BASE, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4, PERSISTENT=True),
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2, PERSISTENT=True, CTAS_PER_SM=3),
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3, PERSISTENT=True, CTAS_PER_SM=2),
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4, PERSISTENT=True, CTAS_PER_SM=2),
    dict(BASE, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2, PERSISTENT=True, CTAS_PER_SM=2),
]


def main():
    for m, n, k in SHAPES:
        qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
        qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
        bias = torch.randn(n, device="cuda")
        want = ref.fp8_gemm_nt(qa[:512], sa[:512].contiguous(), qb, sb, bias).float()
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * m * n * k
        try:
            sa_m = sa.t().contiguous().t()
            cub = triton.testing.do_bench(lambda: torch._scaled_mm(qa, qb.t(), sa_m, sb.t(), out_dtype=torch.bfloat16),
                                          return_mode="median")
            print(f"{m}x{n}x{k} cublas_blockwise {flops / cub / 1e9:.0f} TFLOP/s", flush=True)
        except Exception as e:
            print(f"{m}x{n}x{k} cublas_blockwise failed: {type(e).__name__}: {str(e)[:100]}", flush=True)
        for cfg in CONFIGS:
            tag = (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']} w{cfg['num_warps']} s{cfg['num_stages']}"
                   f"{' persistent' if cfg.get('PERSISTENT') else ''}"
                   f"{' x' + str(cfg['CTAS_PER_SM']) if cfg.get('CTAS_PER_SM', 1) > 1 else ''}")
            try:
                kg.fp8_gemm_nt(qa, sa, qb, sb, bias, d, cfg)
                err = float((d[:512].float() - want).norm() / want.norm())
                ms = triton.testing.do_bench(lambda: kg.fp8_gemm_nt(qa, sa, qb, sb, bias, d, cfg), return_mode="median")
                print(f"{m}x{n}x{k} {tag:36s} {flops / ms / 1e9:6.0f} TFLOP/s  err {err:.1e}", flush=True)
            except Exception as e:
                print(f"{m}x{n}x{k} {tag:36s} failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
