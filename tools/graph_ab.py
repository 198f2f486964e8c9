"""Two builds of the SM90 kernel, A and B, timed in CUDA graphs replayed in alternation.

What a change to how the kernel is launched (a programmatic dependent launch, say) buys shows only
when kernels run back to back, and a few per cent of it is smaller than the clock's drift on a GPU
that follows its power limit. So each shape captures, per build, one graph of ``--calls``
back-to-back GEMMs (``gemm`` chain) or of quantize-then-GEMM pairs (``quantize`` chain: the
activations quantized in the graph, as ltx-core's FP8 linear does, so the GEMM follows a kernel
that does not signal its dependents), then replays A, B, B, A, ... ``--pairs`` times, each replay
between CUDA events. The ratio B / A of throughput is taken per adjacent pair (the two replays run
at nearly the same clock) and its median reported, with the range of the middle half.

    python tools/graph_ab.py A=PATH/libsm90_a.so B=PATH/libsm90_b.so --configs 256x128x1,128x128x1 \
        --shapes 512x4096x4096,32768x4096x4096 [--chains gemm,quantize] [--json OUT]

The libraries come from ``LIB=1 bash tools/sm90_build_standalone.sh DIR name=`` (KERNEL_ROOT=another
checkout for the other build).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ltx_kernels as lk  # noqa: E402
from gemm_protocols import graph_of, lib_gemm, tile_spec  # noqa: E402


def capture(fn, calls):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = graph_of(fn, calls)
    torch.cuda.synchronize()
    return graph


def alternate(graph_a, graph_b, pairs):
    """Per-pair time ratios t_a / t_b (B's throughput over A's), replays ordered A B B A A B ..."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(4 * pairs)]
    order = []
    for i in range(2 * pairs):
        order += ["a", "b"] if i % 2 == 0 else ["b", "a"]
    for (start, end), which in zip(events, order):
        start.record()
        (graph_a if which == "a" else graph_b).replay()
        end.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in events]
    ratios = []
    for i in range(0, len(times), 2):
        t = dict(zip(order[i:i + 2], times[i:i + 2]))
        ratios.append(t["a"] / t["b"])
    return ratios, statistics.median(t for t, w in zip(times, order) if w == "a"), \
        statistics.median(t for t, w in zip(times, order) if w == "b")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs=2, help="A=PATH B=PATH (kernel libraries)")
    ap.add_argument("--configs", default="256x128x1")
    ap.add_argument("--shapes", default="512x4096x4096,8192x4096x4096,32768x4096x4096")
    ap.add_argument("--chains", default="gemm,quantize")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()
    (name_a, path_a), (name_b, path_b) = (s.split("=", 1) for s in args.libs)
    gemm_a, gemm_b = lib_gemm(path_a), lib_gemm(path_b)
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        qa, sa = lk.quantize_blockwise(x)
        qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
        sb_tma = lk.gemm._tma_weight_scales(sb)
        bias = torch.randn(n, device="cuda")
        want = lk.reference.fp8_gemm_nt(qa, sa, qb, sb, bias)
        flops = 2.0 * m * n * k * args.calls
        for spec in args.configs.split(","):
            cfg, _ = tile_spec(spec)
            for chain in args.chains.split(","):
                outs = {}
                graphs = {}
                for name, gemm in (("a", gemm_a), ("b", gemm_b)):
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    if chain == "gemm":
                        def fn(gemm=gemm, out=out):
                            gemm(qa, sa, qb, sb_tma, bias, out, cfg)
                    else:
                        def fn(gemm=gemm, out=out):
                            q, s = lk.quantize_blockwise(x)
                            gemm(q, s, qb, sb_tma, bias, out, cfg)
                    graphs[name] = capture(fn, args.calls)
                    outs[name] = out
                errs = {w: ((o.float() - want).norm() / want.norm()).item() for w, o in outs.items()}
                ratios, ms_a, ms_b = alternate(graphs["a"], graphs["b"], args.pairs)
                q = statistics.quantiles(ratios, n=4)
                row = {"shape": shape, "config": spec, "chain": chain, "calls": args.calls, "pairs": args.pairs,
                       "a": name_a, "b": name_b, "tflops_a": round(flops / ms_a / 1e9, 1),
                       "tflops_b": round(flops / ms_b / 1e9, 1), "b_over_a": round(statistics.median(ratios), 4),
                       "b_over_a_iqr": [round(q[0], 4), round(q[2], 4)], "rel_err": errs}
                rows.append(row)
                print(f"{shape:>16s} {spec:>10s} {chain:8s} {name_a}={row['tflops_a']:7.1f} "
                      f"{name_b}={row['tflops_b']:7.1f} TFLOP/s  {name_b}/{name_a}={row['b_over_a']:.4f} "
                      f"(IQR {row['b_over_a_iqr'][0]:.4f}-{row['b_over_a_iqr'][1]:.4f})  "
                      f"rel_err {errs['a']:.2e}/{errs['b']:.2e}", flush=True)
                del graphs
        torch.cuda.empty_cache()
    if args.json:
        env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
        json.dump({"env": env, "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
