"""Launches, for Nsight Compute, this package's SM90 GEMM (the host's choice and any forced
instantiations), kernel variants built as libraries, and LTX-2's own (vendored deep_gemm) on one
shape, each once after a warm-up:

    ncu --clock-control none -k regex:"fp8_gemm_kernel|sm90_fp8_gemm_1d2d" -s N -c N ... \\
        python tools/upstream/ncu_vs_deep_gemm.py UPSTREAM_PATH M N K [BMxBNxCL | LIB.so@BMxBNxCL ...]

(N = 2 + the number of configs, 1 + where deep_gemm refuses the shape
(``gemm_protocols.deep_gemm_accepts``: it is then not launched); the warm-up launches are
skipped.) ``LIB.so@cfg`` is a library
from ``LIB=1 tools/sm90_build_standalone.sh`` (the kernel variant's own instantiation of cfg).
"""
import pathlib
import sys

import torch

import ltx_kernels as lk

sys.path.insert(0, sys.argv[1])
import blockwise_cpp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gemm_protocols import deep_gemm_accepts, lib_gemm  # noqa: E402  (tools/: the variant libraries' ctypes entry)

m, n, k = (int(v) for v in sys.argv[2:5])
specs = sys.argv[5:]
torch.manual_seed(0)
qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
sb_tma = lk.gemm._tma_weight_scales(sb)  # as the SM90 kernel reads it (a copy where K / 128 % 4)
bias = torch.randn(n, device="cuda")
d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
mod = lk._ext.load("_C_gemm_sm90")[0]
runs = [lambda: lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=d)]
for spec in specs:
    path, _, cfg = spec.rpartition("@")
    cfg = tuple(int(v) for v in cfg.split("x"))
    if path:
        runs.append(lambda c=cfg, call=lib_gemm(path): call(qa, sa, qb, sb_tma, bias, d, c))
    else:
        runs.append(lambda c=cfg: mod.fp8_gemm_nt(qa, sa, qb, sb_tma, bias, d, *c, 1))
if deep_gemm_accepts(n, k):
    runs += [lambda: blockwise_cpp.fp8_gemm_nt_sm90((qa, sa), (qb, sb), d, bias=bias)]
else:
    print(f"deep_gemm refuses N = {n}, K = {k}: not launched", file=sys.stderr)
for r in runs:  # warm-up (skipped by ncu -s)
    r()
torch.cuda.synchronize()
for r in runs:
    r()
torch.cuda.synchronize()
