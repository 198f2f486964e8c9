"""Every tile config of the SM90 GEMM at the LTX-2 and anchor shapes, next to cuBLAS blockwise
``_scaled_mm`` in the same process: the data behind ``SM90_TILES`` in ltx_kernels/gemm.py.
Checks each result against the fp32 reference on sampled rows, then times it (CUDA events,
median). Prints one line per (shape, config) and writes JSON.

    python tools/probe_sm90.py [--json OUT.json] [--shapes 16384x4096x4096,...] [--triton] [--rounds R] [--graph]

--splits 1,2,4 adds each config with its K cut into that many slices (split-K) as columns "BMxBNxCL/S".
--triton adds the public backends through fp8_gemm_nt: "triton" (its cached / shipped / heuristic
config) and "cuda" (the host's tile and split-K choice), and the name of the kernel cuBLAS runs; --rounds R times every column R times in alternating order and reports
each column's median over the rounds (the GPU's clock drifts within a run).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import triton.testing

import ltx_kernels as lk
from ltx_kernels import _ext
from ltx_kernels import reference as ref

SHAPES = [(16384, 4096, 4096), (16384, 16384, 4096), (16384, 4096, 16384), (4096, 4096, 4096),
          (1024, 4096, 4096), (16384, 2048, 2048), (3000, 4096, 4096), (3000, 2176, 7168),
          (8192, 2048, 4096), (8192, 4096, 2048), (256, 4096, 4096)]


def cublas_blockwise(qa, sa, qb, sb):
    sa_m = sa.t().contiguous().t()
    return lambda: torch._scaled_mm(qa, qb.t(), sa_m, sb.t(), out_dtype=torch.bfloat16)


def kernel_name(fn) -> str:
    """The name of the (longest-running) CUDA kernel fn launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return max(events, key=lambda e: e.device_time_total).name[:120] if events else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--shapes")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetition time in ms")
    ap.add_argument("--triton", action="store_true", help="also time the Triton backend; name cuBLAS's kernel")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (no host cost: small shapes)")
    ap.add_argument("--splits", default="1", help="K split counts to time each config with, e.g. 1,2,4 (small M)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    mod = _ext.load("_C_gemm_sm90")[0]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for m, n, k in shapes:
        qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
        qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
        sb_tma = lk.gemm._tma_weight_scales(sb)  # as the SM90 kernel reads it (a copy where K / 128 % 4)
        bias = torch.randn(n, device="cuda")
        pick = torch.randperm(m, device="cuda")[:256].sort().values
        want = ref.fp8_gemm_nt(qa[pick], sa[pick].contiguous(), qb, sb, bias).float()
        flops = 2.0 * m * n * k
        row = {"shape": f"{m}x{n}x{k}", "chosen": "x".join(map(str, lk.gemm.sm90_plan(m, n, k)[0]))}
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runners = {}
        try:
            f = cublas_blockwise(qa, sa, qb, sb)
            f()
            runners["cublas_blockwise"] = f
            if args.triton:
                row["cublas_kernel"] = kernel_name(f)
        except Exception as e:
            row["cublas_blockwise_error"] = f"{type(e).__name__}: {str(e)[:120]}"
        columns = [("x".join(map(str, cfg)) + (f"/{sp}" if sp > 1 else ""), (*cfg, sp))
                   for sp in map(int, args.splits.split(",")) if (k // 128) % sp == 0 for cfg in lk.gemm.SM90_TILES]
        if args.triton:
            columns += [("cuda", "cuda"), ("triton", "triton")]
        for tag, cfg in columns:
            if isinstance(cfg, str):
                fn = lambda b=cfg: lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=d, backend=b)  # noqa: E731
            else:
                fn = lambda cfg=cfg: mod.fp8_gemm_nt(qa, sa, qb, sb_tma, bias, d, *cfg)  # noqa: E731
            try:
                d.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = float((d[pick].float() - want).norm() / want.norm())
                unwritten = int(torch.isnan(d).sum())
                row[tag + "_err"] = err
                if unwritten or err > 3e-3:
                    row[tag + "_bad"] = f"unwritten {unwritten}, err {err:.2e}"
                runners[tag] = fn
            except Exception as e:
                row[tag + "_error"] = f"{type(e).__name__}: {str(e)[:160]}"
        times = {tag: [] for tag in runners}
        for r in range(args.rounds):
            order = list(runners) if r % 2 == 0 else list(reversed(runners))
            for tag in order:
                if args.graph:
                    ms = triton.testing.do_bench_cudagraph(runners[tag], rep=args.rep, return_mode="median")
                else:
                    ms = triton.testing.do_bench(runners[tag], rep=args.rep, return_mode="median")
                times[tag].append(ms)
        for tag, ts in times.items():
            row[tag] = flops / statistics.median(ts) / 1e9
        rows.append(row)
        cells = "  ".join(f"{tag}={row.get(tag, float('nan')):5.0f}" + ("!" if row.get(tag + "_bad") else "")
                          for tag, cfg in columns if not isinstance(cfg, str))
        if args.triton:
            splits = lk.gemm.sm90_plan(m, n, k)[1]
            cells += (f"  cuda(splits {splits})={row.get('cuda', float('nan')):5.0f}"
                      f"  triton={row.get('triton', float('nan')):5.0f}")
        print(f"{row['shape']:>18s} cublas={row.get('cublas_blockwise', float('nan')):5.0f}  {cells}  "
              f"chosen {row['chosen']}" + (f"  cublas kernel {row.get('cublas_kernel')}" if args.triton else ""),
              flush=True)
        for key in [k for k in row if k.endswith("_error") or k.endswith("_bad")]:
            print(f"    {key}: {row[key]}", flush=True)
        del qa, qb, d
    if args.json:
        env = {"device": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        with open(args.json, "w") as f:
            json.dump({"env": env, "unit": "TFLOP/s", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
