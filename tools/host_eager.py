"""Eager throughput of norm+rope as a caller sees it: wall-clock time per call of a loop of calls
(host and GPU overlapped), at LTX-2 sizes, next to the kernel's CUDA-graph replay time. When the
two agree the call is GPU-bound. Also reports whether the per-signature plan was taken.

    python tools/host_eager.py
"""

import torch
import triton.testing

import ltx_kernels as lk
from ltx_kernels import norm_rope

from host_overhead import per_call_us as wall_us  # tools/ is the script's folder (on sys.path when run as a script)


def graph_us(fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(g.replay, return_mode="median") * 1e3


def main():
    bf = torch.bfloat16
    h, nh = 4096, 32
    w = torch.rand(h, device="cuda", dtype=bf)
    print(f"{'case':34s} {'wall us/call':>12s} {'graph us':>9s} {'wall GB/s':>9s} {'graph GB/s':>10s}")
    for t in (8192, 32768):
        x = torch.randn(1, t, h, device="cuda", dtype=bf)
        c, s = (torch.randn(1, t, h, device="cuda", dtype=bf) for _ in range(2))
        cs, ss = (torch.randn(1, t, nh, h // nh // 2, device="cuda", dtype=bf).swapaxes(1, 2) for _ in range(2))
        for fp8 in (False, True):
            out_b = x.numel() * (1 if fp8 else 2)
            cases = {
                f"interleaved T={t} {'fp8' if fp8 else 'bf16'}": (lambda: lk.rms_norm_rope(x, c, s, w, fp8),
                                                                   x.numel() * 6 + out_b),
                f"split T={t} {'fp8' if fp8 else 'bf16'}": (lambda: lk.rms_norm_split_rope(x, cs, ss, w, fp8),
                                                             x.numel() * 4 + out_b),
            }
            for name, (fn, nbytes) in cases.items():
                wu, gu = wall_us(fn, 200), graph_us(fn)
                print(f"{name:34s} {wu:12.1f} {gu:9.1f} {nbytes / wu / 1e3:9.0f} {nbytes / gu / 1e3:10.0f}", flush=True)
    tiny = torch.randn(1, 4, h, device="cuda", dtype=bf)
    print(f"host cost, [1, 4, {h}] interleaved: {wall_us(lambda: lk.rms_norm_rope(tiny, tiny, tiny, w), 3000):.1f} "
          f"us/call; plans kept: {len(norm_rope._plans._seen)}")


if __name__ == "__main__":
    main()
