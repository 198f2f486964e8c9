"""The first ``fp8_gemm_nt`` call of a process on a GPU: which backend it takes, whether the SM90
extension had to be compiled first (its one-line notices go to stderr), and which CUDA kernels
the call launched (torch profiler). Run it twice on a fresh machine: the first run compiles, the
second loads the cached build.

    LTX_KERNELS_LOG=debug python tools/first_use.py [M N K]

Exit code 1 unless the call ran the SM90 kernel (``fp8_gemm_kernel``) and matches the reference.
"""
from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import ltx_kernels as lk
from ltx_kernels import _ext
from ltx_kernels import reference as ref


def main(argv) -> int:
    m, n, k = (int(v) for v in argv[:3]) if len(argv) >= 3 else (4096, 4096, 4096)
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; before the call: "
          f"_C_gemm_sm90 {_ext.status('_C_gemm_sm90')}", flush=True)
    a, sa = ref.quantize_blockwise(torch.randn(m, k, device=dev))
    b, sb = ref.quantize_weights_blockwise(torch.randn(n, k, device=dev))
    torch.cuda.synchronize()
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        d = lk.fp8_gemm_nt(a, sa, b, sb)  # the process's first call: may compile the extension
        torch.cuda.synchronize()
    secs = time.time() - t0
    kernels = sorted({e.key for e in prof.key_averages()})
    print(f"first call: {secs:.1f} s (compile included, if any)")
    print(f"_C_gemm_sm90: {_ext.status('_C_gemm_sm90')}")
    print("CUDA kernels of the first call:\n  " + "\n  ".join(kernels))
    want = ref.fp8_gemm_nt(a, sa, b, sb).float()
    err = float((d.float() - want).norm() / want.norm())
    sm90 = any("fp8_gemm_kernel" in name for name in kernels)
    print(f"SM90 kernel ran: {sm90}; rel. error vs reference {err:.2e}")
    return 0 if sm90 and err < 3e-3 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
