"""Blockwise FP8 GEMMs under two timing protocols, with the SM clock seen while timing.

The H200 boosts to 1980 MHz when cool and settles lower once the power limit (700 W) bites, which
an FP8 GEMM at full speed reaches within a fraction of a second. So one kernel has two speeds:
  burst      a few warm-up calls, then 20 timed calls, each after a 256 MB write that flushes the
             L2 (the protocol most published GEMM figures use);
  sustained  back-to-back calls for --sustain-ms first, then 50 back-to-back timed calls (what a
             long generation run sees), queued behind a short GPU sleep so that the host is ahead
             of the GPU: the events then time the kernels back to back. Without it, at 10-30 us
             kernels (M <= 1024) the host's cost per call is of the kernel's order
             (tools/gemm_host_cost.py) and the events could time the host instead (two columns of
             the same kernel at 1024x4096x4096 differed by up to 30 % without the head start on an
             H100, by 1-3 % with it).
  graph      ten back-to-back calls captured in a CUDA graph, the median of 20 replays over ten
             (the kernels alone: no host cost, each launched right behind the one before, L2 warm;
             what a programmatic launch changes shows here).
  interleaved  every backend of the row in turn, back to back: --sustain-ms of rounds first, then 30
             timed rounds queued behind a GPU sleep, the median per backend. All backends run in
             one power state and at one clock, so the ratios are work per clock under the cap,
             without the energy a kernel draws deciding its own clock (sustained keeps that).
  interleaved_shuffled  interleaved, each round in a fresh (seeded) order of the backends, so that
             no backend always runs right after the same one (in `interleaved` the order is fixed
             within a shape, and each backend always follows the same neighbour, whose traces in
             L2 and in the power state it inherits); `NAME_after` holds its median TFLOP/s by the
             backend that ran just before it.
  interleaved_probed  interleaved, each call followed by the probe below (`NAME_probe_mhz`: the
             clock right after that backend's call, which tells whether the backends of one window
             really share one clock); the probes also lower the window's power.
  probed     sustained, with the clock measured instead of sampled: back to back for --sustain-ms,
             then PROBED_ROUNDS (20) rounds of PROBED_CALLS (5) timed calls, each round followed
             by a timed GPU sleep of PROBE_CYCLES SM cycles (torch.cuda._sleep counts clock64);
             the sleep's cycles over its time is the SM clock the backend's own load left the GPU
             at (`NAME_probe_mhz`). NVML's 5 ms samples (`NAME_mhz`) did not follow the clock each
             kernel ran at (docs/sm90-gemm.md).
Each row times our backends and the anchors in the same process, each call between CUDA events
(median), with the SM clock and board power sampled through NVML while the timed calls run; the
order of the backends rotates from shape to shape. Anchors: cuBLAS blockwise and tensorwise
(``torch._scaled_mm``), cuBLAS bf16, and with ``--upstream-path`` LTX-2's own SM90 kernel (a
vendored DeepGEMM ``sm90_fp8_gemm_1d2d`` with bias) from the folder tools/upstream/build_upstream.sh
prints; it accepts only N, K in {2048, 4096, 8192, 16384} (other shapes crash the process, so they
are skipped) and gets the same bias as ours.

    python tools/gemm_protocols.py [--json OUT] [--shapes 16384x4096x4096,...] [--backends cuda,triton]
        [--upstream-path DIR] [--lib NAME=PATH ...]

Backends: ``cuda`` / ``triton`` (``fp8_gemm_nt`` with that backend), ``cuda@256x128x2`` (one SM90
instantiation of the built extension, forced; ``cuda@128x128x1/4`` with 4 K slices),
``lib:NAME@256x128x2`` (that instantiation of a kernel variant built as a plain library by ``LIB=1
tools/sm90_build_standalone.sh`` and named with ``--lib NAME=PATH``, called through ctypes;
``lib:NAME@192x128x1/2`` with 2 K slices, its workspace allocated outside the timing). Every
backend's output is checked against the reference (``rel_err``). Each row also records the tile
config and K slices the host picks for ``cuda`` (``cuda_config``, ``BMxBNxCL/S``; printed in
brackets).
"""
import ctypes
import argparse
import json
import random
import statistics
import sys
import time

import torch

import ltx_kernels as lk
from nvml_clock import ClockSampler

SHAPES = [(16384, 4096, 4096), (16384, 16384, 4096), (16384, 4096, 16384), (4096, 4096, 4096),
          (1024, 4096, 4096), (256, 4096, 4096), (16384, 2048, 2048), (3000, 4096, 4096), (8192, 4096, 4096),
          (8192, 16384, 4096), (8192, 4096, 16384), (3000, 2176, 7168), (16384, 6144, 4096)]


_FLUSH = None


# GPU cycles of the sleep that the sustained protocol's timed calls queue behind (2-3 ms at the
# H100 / H200 clocks): enough for the host to enqueue 50 calls of up to ~40 us host cost each.
HEAD_START_CYCLES = 4_000_000
# SM cycles of the clock probe (about 0.1 ms at the clocks under the power cap, so CUDA events'
# ~0.5 us resolution is well under 1 %, and short against the firmware's reaction to the idle gap).
PROBE_CYCLES = 150_000
# The probed protocol's timed rounds, each of PROBED_CALLS back-to-back calls and one probe.
PROBED_ROUNDS, PROBED_CALLS = 20, 5


def _timed_ms(fns, reps, flush, head_start, on_gpu_start, probes=None, launches=1, orders=None, after=None):
    """{name: median ms} of reps rounds calling each function of fns in turn, each call between two
    CUDA events. flush: a 256 MB write before every call. head_start: all calls queue behind a GPU
    sleep (HEAD_START_CYCLES for every 50 GEMM launches, `launches` a call), and on_gpu_start runs
    once the GPU has reached the first (the clock sampler drops what it saw during the sleep).
    probes: a dict that receives {name: median MHz} of a timed GPU sleep of PROBE_CYCLES after
    each call. orders: one list of the names a round (default: fns' order every round); after: a
    dict that receives {name: {predecessor: median ms}}."""
    global _FLUSH
    if flush and _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    starts = {n: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for n in fns}
    ends = {n: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for n in fns}
    probed = {n: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for n in fns} if probes is not None else None
    if head_start:
        torch.cuda._sleep(HEAD_START_CYCLES * max(1, reps * len(fns) * launches // 50))
    calls = []  # (name, round, predecessor)
    for i in range(reps):
        for n in (orders[i] if orders else fns):
            fn = fns[n]
            calls.append((n, i, calls[-1][0] if calls else "start"))
            if flush:
                _FLUSH.fill_(i & 0xFF)
            starts[n][i].record()
            fn()
            ends[n][i].record()
            if probed is not None:
                torch.cuda._sleep(PROBE_CYCLES)
                probed[n][i].record()
    if head_start and on_gpu_start is not None:
        first = starts[next(iter(fns))][0]
        while not first.query():
            time.sleep(5e-5)
        on_gpu_start()
    torch.cuda.synchronize()
    if probed is not None:
        probes.update({n: PROBE_CYCLES / statistics.median(e.elapsed_time(p) for e, p in zip(ends[n], probed[n])) / 1e3
                       for n in fns})
    if after is not None:
        by = {}
        for n, i, pred in calls:
            by.setdefault(n, {}).setdefault(pred, []).append(starts[n][i].elapsed_time(ends[n][i]))
        after.update({n: {p: statistics.median(v) for p, v in preds.items()} for n, preds in by.items()})
    return {n: statistics.median(s.elapsed_time(e) for s, e in zip(starts[n], ends[n])) for n in fns}


def timed_median_ms(fn, reps, flush, head_start=False, on_gpu_start=None):
    """Median ms of reps calls of fn (see _timed_ms)."""
    return _timed_ms({"fn": fn}, reps, flush, head_start, on_gpu_start)["fn"]


def timed_interleaved_ms(fns, rounds, on_gpu_start=None, probes=None, after=None):
    """Median ms per function of fns (a dict) called in turn for the given number of rounds, all
    queued behind the GPU sleep (see _timed_ms); given a dict for after, each round in a seeded
    random order, and the medians by predecessor go into it."""
    orders = None
    if after is not None:
        rng = random.Random(0)
        orders = [rng.sample(list(fns), len(fns)) for _ in range(rounds)]
    return _timed_ms(fns, rounds, False, True, on_gpu_start, probes, orders=orders, after=after)


def _load(fns, sustain_ms, calls_per_sync):
    """Keep the GPU busy with the functions of fns in turn for sustain_ms (the power limit settles)."""
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < sustain_ms:
        for _ in range(calls_per_sync):
            for fn in fns:
                fn()
        torch.cuda.synchronize()


def measure_interleaved(fns, sustain_ms, sampler, rounds=30, probes=None, after=None):
    """{name: ms} of the interleaved protocol, with the clock and power of the shared window (and,
    given a dict for probes, each backend's probed clock: interleaved_probed; given a dict for
    after, rounds in shuffled orders and the medians by predecessor: interleaved_shuffled)."""
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    _load(fns.values(), sustain_ms, 1)
    return sampler.window(lambda: timed_interleaved_ms(fns, rounds, on_gpu_start=sampler.restart, probes=probes,
                                                       after=after))


def _probed_window(fn, sampler, probes):
    """(ms a call, NVML MHz, W) of the probed protocol's timed part (module docstring): PROBED_ROUNDS
    rounds of PROBED_CALLS back-to-back calls timed together, each followed by the probe
    (probes["fn"])."""
    def block():
        for _ in range(PROBED_CALLS):
            fn()

    times, mhz, watts = sampler.window(lambda: _timed_ms({"fn": block}, PROBED_ROUNDS, False, True, sampler.restart,
                                                         probes, launches=PROBED_CALLS))
    return times["fn"] / PROBED_CALLS, mhz, watts


def graph_of(fn, calls):
    """A CUDA graph of calls back-to-back calls of fn (warmed up already), replayed once."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    return graph


def measure(fn, protocol, sustain_ms, sampler, probes=None):
    """(ms a call, NVML MHz, W) of one backend under protocol (module docstring); probed also puts
    the probed MHz into probes["fn"]."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    if protocol == "graph":
        graph = graph_of(fn, 10)
        ms, mhz, watts = sampler.window(lambda: timed_median_ms(graph.replay, 20, flush=False))
        return ms / 10, mhz, watts
    if protocol in ("sustained", "probed"):
        _load([fn], sustain_ms, 10)
        if protocol == "probed":
            return _probed_window(fn, sampler, probes)
        return sampler.window(lambda: timed_median_ms(fn, 50, flush=False, head_start=True,
                                                      on_gpu_start=sampler.restart))
    return sampler.window(lambda: timed_median_ms(fn, 20, flush=True))


DEEP_GEMM_DIMS = (2048, 4096, 8192, 16384)


def deep_gemm_accepts(n, k):
    """Whether LTX-2's deep_gemm takes an N x K weight (its template is instantiated for these N, K
    only; other shapes crash its process)."""
    return n in DEEP_GEMM_DIMS and k in DEEP_GEMM_DIMS


def upstream_gemm(path):
    """LTX-2's ``blockwise_cpp.fp8_gemm_nt_sm90`` from a build folder, or None."""
    if not path:
        return None
    sys.path.insert(0, path)
    import blockwise_cpp

    return blockwise_cpp.fp8_gemm_nt_sm90


def tile_spec(spec):
    """'256x128x2' -> ((256, 128, 2), 1); '128x128x1/4' (4 K slices) -> ((128, 128, 1), 4)."""
    cfg, _, splits = spec.partition("/")
    return tuple(int(v) for v in cfg.split("x")), int(splits or 1)


def lib_gemm(path):
    """The C entry point of a kernel library built from tools/sm90_lib.cu, as
    call(qa, sa, qb, sb, bias or None, d, (block_m, block_n, cluster), splits=1, ws=None) on the
    current stream (splits > 1: ws an fp32 workspace of splits * M * N)."""
    lib = ctypes.CDLL(path)
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    head = [ptr, ptr, ptr, i64, ptr, i64, i64, ptr, ptr, i64, i32, i32, i32, i32, i32, i32]
    fn = lib.ltx_sm90_launch
    fn.restype, fn.argtypes = ctypes.c_char_p, head + [i32, ptr]
    fn_splits = getattr(lib, "ltx_sm90_launch_splits", None)  # libraries built before it have none
    if fn_splits is not None:
        fn_splits.restype, fn_splits.argtypes = ctypes.c_char_p, head + [i32, ptr, i32, ptr]
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def call(qa, sa, qb, sb, bias, d, cfg, splits=1, ws=None):
        assert sa.stride(0) == 1 and sa.stride(1) % 4 == 0 and sa.data_ptr() % 16 == 0, "sa must be M-major"
        args = (qa.data_ptr(), qb.data_ptr(), sa.data_ptr(), sa.stride(1), sb.data_ptr(), sb.stride(0), sb.stride(1),
                None if bias is None else bias.data_ptr(), d.data_ptr(), d.stride(0), qa.shape[0], qb.shape[0],
                qa.shape[1], *cfg)
        stream = torch.cuda.current_stream().cuda_stream
        if splits == 1:
            err = fn(*args, sms, stream)
        else:
            if fn_splits is None:
                raise RuntimeError(f"{path} has no ltx_sm90_launch_splits (built before it): rebuild it")
            assert ws is not None and ws.dtype == torch.float32 and ws.numel() >= splits * d.numel(), "ws"
            err = fn_splits(*args, splits, ws.data_ptr(), sms, stream)
        if err:
            raise RuntimeError(err.decode())

    return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--shapes")
    ap.add_argument("--backends", default="cuda", help="our backends to time (cuda, triton)")
    ap.add_argument("--protocols", default="burst,sustained")
    ap.add_argument("--anchors", default="cublas_blockwise,cublas_tensorwise,cublas_bf16")
    ap.add_argument("--sustain-ms", type=float, default=1500.0)
    ap.add_argument("--upstream-path", help="folder holding LTX-2's built blockwise_cpp (deep_gemm column)")
    ap.add_argument("--lib", action="append", default=[], help="NAME=PATH of a kernel library (backend lib:NAME@cfg)")
    args = ap.parse_args()
    libs = {spec.split("=", 1)[0]: lib_gemm(spec.split("=", 1)[1]) for spec in args.lib}
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    sampler = ClockSampler()
    deep_gemm = upstream_gemm(args.upstream_path)
    rows = []
    for shape_index, (m, n, k) in enumerate(shapes):
        torch.manual_seed(0)
        qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
        qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
        sb_tma = lk.gemm._tma_weight_scales(sb)  # as the SM90 kernel reads it (a copy where K / 128 % 4)
        bias = torch.randn(n, device="cuda")
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        sa_m = sa.t().contiguous().t()  # cuBLAS wants the scales M-major (outside the timing)
        ones_a = torch.ones((), device="cuda")
        bf_a, bf_b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(n, k, device="cuda",
                                                                                        dtype=torch.bfloat16)
        fns, outs = {}, {}
        for be in filter(None, args.backends.split(",")):
            if be.startswith("lib:"):  # lib:NAME@256x128x2, lib:NAME@192x128x1/2 with 2 K slices
                name, spec = be[4:].split("@")
                cfg, splits = tile_spec(spec)
                outs[be] = torch.empty_like(d)
                ws = torch.empty(splits * m * n, device="cuda") if splits > 1 else None
                fns[be] = lambda cfg=cfg, call=libs[name], out=outs[be], s=splits, ws=ws: call(
                    qa, sa, qb, sb_tma, bias, out, cfg, s, ws)
            elif "@" in be:  # one SM90 instantiation, forced: cuda@256x128x2 (block_m x block_n x cluster),
                # cuda@128x128x1/4 with 4 K slices
                cfg, splits = tile_spec(be.split("@")[1])
                mod = lk._ext.load("_C_gemm_sm90")[0]
                fns[be] = lambda cfg=cfg, s=splits, mod=mod: mod.fp8_gemm_nt(qa, sa, qb, sb_tma, bias, d, *cfg, s)
            else:
                fns[be] = lambda be=be: lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=d, backend=be)
        anchors = {"cublas_blockwise": lambda: torch._scaled_mm(qa, qb.t(), sa_m, sb.t(), out_dtype=torch.bfloat16),
                   "cublas_tensorwise": lambda: torch._scaled_mm(qa, qb.t(), ones_a, ones_a, out_dtype=torch.bfloat16),
                   "cublas_bf16": lambda: bf_a @ bf_b.t()}
        fns.update({a: anchors[a] for a in args.anchors.split(",") if a in anchors})
        errors = {}
        if deep_gemm is not None and deep_gemm_accepts(n, k):
            outs["deep_gemm"] = torch.empty_like(d)
            fns["deep_gemm"] = lambda: deep_gemm((qa, sa), (qb, sb), outs["deep_gemm"], bias=bias)
        want = lk.reference.fp8_gemm_nt(qa, sa, qb, sb, bias)
        refused = {}  # backends that could not run this shape (e.g. K slices not dividing K / 128): not timed
        for name in [be for be in fns if be in outs or be.startswith("cuda")]:
            got = outs.get(name, d)
            got.fill_(float("nan"))
            try:
                fns[name]()
            except RuntimeError as e:
                refused[name] = str(e)
                del fns[name]
                continue
            torch.cuda.synchronize()
            errors[name] = ((got.float() - want).norm() / want.norm()).item()
        del want
        print(f"{m}x{n}x{k} rel_err " + " ".join(f"{k_}={v:.2e}" for k_, v in errors.items())
              + "".join(f" {k_}=refused ({v})" for k_, v in refused.items()), flush=True)
        names = list(fns)
        names = names[shape_index % len(names):] + names[:shape_index % len(names)]
        flops = 2.0 * m * n * k
        # the SM90 tile config and K slices the host picks for `cuda` (block_m x block_n x cluster / slices)
        cfg, splits = lk.gemm.sm90_plan(m, n, k)
        cuda_config = "x".join(map(str, cfg)) + f"/{splits}"
        for protocol in args.protocols.split(","):
            row = {"shape": f"{m}x{n}x{k}", "protocol": protocol, "order": names, "rel_err": errors,
                   "refused": refused, "cuda_config": cuda_config}
            if protocol.startswith("interleaved"):  # one window for all backends
                probes = {} if protocol == "interleaved_probed" else None
                after = {} if protocol == "interleaved_shuffled" else None
                rounds = 60 if after is not None else 30  # each backend follows a given one in about 1/n of its calls
                times, mhz, watts = measure_interleaved({name: fns[name] for name in names}, args.sustain_ms, sampler,
                                                        rounds=rounds, probes=probes, after=after)
                timed = {name: (ms, mhz, watts) for name, ms in times.items()}
                for name, preds in (after or {}).items():
                    row[name + "_after"] = {p: round(flops / ms / 1e9, 1) for p, ms in sorted(preds.items())}
                for name, probe_mhz in (probes or {}).items():
                    row[name + "_probe_mhz"] = round(probe_mhz, 1)
            else:
                timed = {}
                for name in names:
                    try:
                        probes = {} if protocol == "probed" else None
                        timed[name] = measure(fns[name], protocol, args.sustain_ms, sampler, probes)
                        if probes:
                            row[name + "_probe_mhz"] = round(probes["fn"], 1)
                    except Exception as e:
                        row[name + "_error"] = f"{type(e).__name__}: {str(e)[:160]}"
            for name, (ms, mhz, watts) in timed.items():
                row[name] = round(flops / ms / 1e9, 1)
                row[name + "_mhz"] = mhz
                row[name + "_watts"] = watts
            rows.append(row)
            cells = "  ".join(f"{name}={row.get(name, float('nan')):6.0f}@{row.get(name + '_mhz') or 0:4.0f}MHz"
                              + (f"(probe {row[name + '_probe_mhz']:4.0f})" if name + "_probe_mhz" in row else "")
                              + f",{row.get(name + '_watts') or 0:3.0f}W" for name in sorted(fns))
            print(f"{row['shape']:>18s} {protocol:9s} [{cuda_config}] {cells}", flush=True)
            for name in sorted(fns):
                if name + "_after" in row:
                    print(f"{'':>18s}   {name} after " + "  ".join(f"{p}={v:6.0f}" for p, v in row[name + "_after"].items()),
                          flush=True)
        del qa, qb, d, bf_a, bf_b, outs, fns
        torch.cuda.empty_cache()
    if args.json:
        env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "unit": "TFLOP/s, MHz, W (medians)",
               "sustain_ms": args.sustain_ms, "upstream_path": args.upstream_path,
               "protocols": "burst: 5 warm-up calls, median of 20, each after a 256 MB L2 flush; sustained: "
                            "back-to-back for sustain_ms, then median of 50 back-to-back calls queued behind a GPU sleep of "
                            f"{HEAD_START_CYCLES} cycles; graph: ten calls in a CUDA "
                            "graph, median of 20 replays over ten; interleaved: the backends in turn, "
                            "back-to-back for sustain_ms, then the median of 30 rounds behind a GPU sleep; probed: "
                            f"sustained, {PROBED_ROUNDS} rounds of {PROBED_CALLS} timed calls and a timed sleep of "
                            f"{PROBE_CYCLES} cycles "
                            "(probe_mhz: its cycles over its time); interleaved_probed: interleaved with that sleep timed "
                            "after every call; interleaved_shuffled: interleaved, 60 rounds, each in a seeded random "
                            "order (NAME_after: TFLOP/s by the backend run just before)"}
        with open(args.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
