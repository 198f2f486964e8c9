"""Where a GEMM call's time goes at small M: host cost against kernel time, per backend.

For each shape and backend, three numbers (microseconds per call):
  host    Python + launch cost: calls enqueued behind a long GPU sleep, so none waits for the GPU;
  kernel  CUDA-graph replay of 10 calls back to back (no host in the loop, L2 warm);
  wall    a loop of eager calls, host and GPU overlapped (what an eager caller sees).
wall ~ kernel: the call is GPU-bound; wall ~ host: the GPU waits for Python.
``--parts`` adds the host cost of the pieces of our eager call (same protocol): the plan key
alone, the output's allocation alone, and the extension's binding called directly with the
config the host picked (argument conversion, five TMA descriptors, the launch).

    python tools/gemm_host_cost.py [--upstream-path DIR] [--shapes 256x4096x4096,...] [--parts] [--json OUT]
"""
import argparse
import json
import time

import torch

import ltx_kernels as lk
# tools/ is the script's folder (on sys.path when run as a script)
from block_accuracy import graph_ms
from gemm_protocols import upstream_gemm
from host_overhead import per_call_us as wall_us


def host_us(fn, n=100):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(40_000_000)  # ~20 ms of GPU work ahead: every call below only enqueues
    t = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return us


def _parts(qa, sa, qb, sb, bias, d):
    """The pieces of our eager call, each alone (the binding gets the config and the scale layouts
    the cuda backend would give it)."""
    from ltx_kernels import gemm, tuning

    m, n = qa.shape[0], qb.shape[0]
    mod = lk._ext.load("_C_gemm_sm90")[0]
    sa_tma, sb_tma, cfg, splits = gemm.sm90_launch_args(qa, sa, qb, sb)
    return {
        "part:plan key": lambda: tuning.plan_key(qa, sa, qb, sb, bias, d, backend="cuda"),
        "part:empty out": lambda: torch.empty((m, n), dtype=torch.bfloat16, device=qa.device),
        "part:binding": lambda: mod.fp8_gemm_nt(qa, sa_tma, qb, sb_tma, bias, d, *cfg, splits),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="256x4096x4096,512x4096x4096,1024x4096x4096,2048x4096x4096,4096x4096x4096")
    ap.add_argument("--upstream-path", help="folder holding LTX-2's built blockwise_cpp (deep_gemm column)")
    ap.add_argument("--json")
    ap.add_argument("--parts", action="store_true", help="also the host cost of our call's pieces")
    args = ap.parse_args()
    deep_gemm = upstream_gemm(args.upstream_path)
    rows = []
    print(f"{'shape':>16s} {'backend':>17s} {'host us':>8s} {'kernel us':>9s} {'wall us':>8s}")
    for spec in args.shapes.split(","):
        m, n, k = (int(v) for v in spec.split("x"))
        torch.manual_seed(0)
        qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
        qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
        bias = torch.randn(n, device="cuda")
        d, d_dg = (torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        sa_m = sa.t().contiguous().t()
        fns = {"cuda (out=)": lambda: lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=d, backend="cuda"),
               "cuda (new out)": lambda: lk.fp8_gemm_nt(qa, sa, qb, sb, bias, backend="cuda"),
               "cublas_blockwise": lambda: torch._scaled_mm(qa, qb.t(), sa_m, sb.t(), out_dtype=torch.bfloat16)}
        if deep_gemm is not None:
            fns["deep_gemm"] = lambda: deep_gemm((qa, sa), (qb, sb), d_dg, bias=bias)
        if args.parts:
            fns.update(_parts(qa, sa, qb, sb, bias, d))
        for name, fn in fns.items():
            if name.startswith("part:"):  # host cost only: these launch nothing (or not the GEMM alone)
                row = {"shape": spec, "backend": name, "host_us": host_us(fn)}
                rows.append(row)
                print(f"{spec:>16s} {name:>17s} {row['host_us']:8.1f}")
                continue
            row = {"shape": spec, "backend": name, "host_us": host_us(fn),
                   "kernel_us": graph_ms(lambda: [fn() for _ in range(10)], iters=30) * 1e3 / 10,
                   "wall_us": wall_us(fn, 400)}
            rows.append(row)
            print(f"{spec:>16s} {name:>17s} {row['host_us']:8.1f} {row['kernel_us']:9.1f} {row['wall_us']:8.1f}")
    if args.json:
        env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        json.dump({"env": env, "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
