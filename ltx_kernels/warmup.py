"""Tune every Triton kernel for the LTX-2 shapes ahead of time and persist the configs.

    python -m ltx_kernels.warmup                 # LTX-2 GEMM shapes + the memory-bound kernels
    python -m ltx_kernels.warmup --shapes 3000x4096x4096,1024x2048x2048
    python -m ltx_kernels.warmup --only adanorm,split   # the jobs whose label has one of these
    python -m ltx_kernels.warmup --check         # what is cached / shipped / missing, no tuning

Configs go to $LTX_KERNELS_CACHE_DIR (default ~/.cache/ltx-kernels), keyed by device name.
``--check`` only reads the caches, so it needs no GPU: it reports every device that has shipped
or cached configs, and the visible GPU if any.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from ltx_kernels.triton import next_pow2

# (N, K) of every quantized linear in LTX-2 (video 4096/16384, audio 2048/8192, a2v/v2a cross 2048<->4096)
LTX2_NK = [(4096, 4096), (16384, 4096), (4096, 16384), (2048, 2048), (8192, 2048), (2048, 8192),
           (2048, 4096), (4096, 2048)]
M_BUCKETS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
# --quick: the LTX-2 video GEMMs and 2048x2048 at three M, plus an odd shape (N, K not powers of two)
QUICK_GEMM = [(m, n, k) for m in (1024, 4096, 16384) for n, k in
              [(4096, 4096), (16384, 4096), (4096, 16384), (2048, 2048)]] + [(3000, 2176, 7168)]


def _shapes(text: str) -> list[tuple[int, int, int]]:
    """--shapes: "MxNxK,..." -> [(M, N, K), ...]; argparse turns the ValueError into a usage error."""
    out = []
    for spec in text.split(","):
        parts = spec.strip().lower().split("x")
        try:
            m, n, k = (int(v) for v in parts)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r} is not MxNxK (three integers)") from None
        if m < 1 or n < 128 or k < 128 or n % 128 or k % 128:
            raise argparse.ArgumentTypeError(f"{spec!r}: M must be >= 1, N and K positive multiples of 128")
        out.append((m, n, k))
    return out


def gemm_shapes(quick: bool):
    if quick:
        return QUICK_GEMM
    return [(m, n, k) for n, k in LTX2_NK for m in M_BUCKETS]


def _gemm_inputs(quantizers, m, n, k, dev):
    """(a, sa, b, sb, bias, d) for an M x N x K GEMM, quantized by ``quantizers`` (the reference
    module or the package: their activation scales come in different layouts)."""
    a, sa = quantizers.quantize_blockwise(torch.randn(m, k, device=dev))
    b, sb = quantizers.quantize_weights_blockwise(torch.randn(n, k, device=dev))
    return a, sa, b, sb, torch.randn(n, device=dev), torch.empty(m, n, device=dev, dtype=torch.bfloat16)


def _gemm_jobs(shapes, dev):
    from ltx_kernels import reference as ref
    from ltx_kernels import tuning
    from ltx_kernels.triton import fp8_gemm as kg

    for m, n, k in shapes:
        key = (n, k, tuning.m_bucket(m))

        def make(m=m, n=n, k=k):
            a, sa, b, sb, bias, d = _gemm_inputs(ref, m, n, k, dev)
            tma = kg._tma_ok_for(a, b, d)
            return (kg.candidates(m, tma), lambda c: (lambda: kg._launch(a, sa, b, sb, bias, d, c)),
                    2.0 * m * n * k)

        yield "fp8_gemm_nt", key, f"{m}x{n}x{k}", make


def _backend_jobs(shapes, dev):
    """Where the SM90 extension is built: the faster of the two compiled GEMM backends per shape,
    each with its own config (run these after the Triton GEMM jobs). Timed like the Triton configs:
    do_bench, which flushes L2 before every call (a layer's weights are not in L2 in a model;
    graph replays of one call keep a small GEMM's weights there and favour other kernels) and
    whose flush also hides an eager call's host work."""
    import ltx_kernels as lk
    from ltx_kernels import _ext, gemm, tuning

    # (the arch first: loading may compile the extension)
    if torch.cuda.get_device_capability(dev) != (9, 0) or _ext.load("_C_gemm_sm90")[0] is None:
        return
    for m, n, k in shapes:
        def make(m=m, n=n, k=k):
            a, sa, b, sb, bias, d = _gemm_inputs(lk, m, n, k, dev)  # the scale layout callers pass
            return ([{"backend": "cuda"}, {"backend": "triton"}],
                    lambda c: (lambda: lk.fp8_gemm_nt(a, sa, b, sb, bias, out=d, backend=c["backend"])),
                    2.0 * m * n * k)

        yield gemm.BACKEND_CHOICE, (n, k, tuning.m_bucket(m)), f"backend {m}x{n}x{k}", make


def _backend_keys(shapes):
    """The keys the backend jobs record, without a device."""
    from ltx_kernels import gemm, tuning

    for m, n, k in shapes:
        yield gemm.BACKEND_CHOICE, (n, k, tuning.m_bucket(m)), f"backend {m}x{n}x{k}", None


def _memory_jobs(dev):
    """The memory-bound kernels at the LTX-2 sizes the benchmarks use."""
    from ltx_kernels import _checks as chk
    from ltx_kernels.triton import fp6 as kf
    from ltx_kernels.triton import quantize as kq
    from ltx_kernels.triton import rms_norm_rope as kr

    t = 32768
    for h, nh in ((4096, 32), (2048, 32)):
        for fp8 in (False, True):
            def split(h=h, nh=nh, fp8=fp8):
                x = torch.randn(1, t, h, device=dev, dtype=torch.bfloat16)
                c = torch.randn(1, t, nh, h // nh // 2, device=dev, dtype=torch.bfloat16).swapaxes(1, 2)
                out = torch.empty(1, t, h, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
                st = (0, c.stride(1), c.stride(2), c.stride(3))
                w = torch.ones(h, device=dev, dtype=torch.bfloat16)
                row = next_pow2(nh) * next_pow2(h // nh // 2) * 2
                return (kr._candidates(row), lambda cfg: (lambda: kr._launch_split(
                    x.view(-1, h), t, nh, c, c, st, st, w, out.view(-1, h), 1e-6, fp8, cfg)), 0.0)

            yield "rms_norm_rope", ("split", nh, h // nh, "torch.bfloat16", "fp8" if fp8 else "same"), \
                f"split h={h} fp8={fp8}", split

            def inter(h=h, fp8=fp8):
                x = torch.randn(t, h, device=dev, dtype=torch.bfloat16)
                c = torch.randn(t, h, device=dev, dtype=torch.bfloat16)
                out = torch.empty(t, h, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
                cmap = chk.two_level_rows(c, (t,))
                w = torch.ones(h, device=dev, dtype=torch.bfloat16)
                return (kr._candidates(next_pow2(h)), lambda cfg: (lambda: kr._launch_interleaved(
                    x, cmap, cmap, w, out, 1e-6, fp8, cfg)), 0.0)

            yield "rms_norm_rope", ("interleaved", h, "torch.bfloat16", "fp8" if fp8 else "same"), \
                f"interleaved h={h} fp8={fp8}", inter

    for kind, kernel in (("pack", kf._pack_kernel), ("unpack", kf._unpack_kernel)):
        def fp6(kernel=kernel, kind=kind):
            e = 16384 * 8192
            src = torch.randint(0, 256, (e if kind == "pack" else e // 4 * 3,), device=dev, dtype=torch.uint8)
            dst = torch.empty(e // 4 * 3 if kind == "pack" else e, device=dev, dtype=torch.uint8)
            return (kf._candidates(), lambda cfg: (lambda: kf._launch(kernel, src.view(torch.int32),
                                                                       dst.view(torch.int32), e // 16, cfg)), 0.0)

        yield "fp6", (kind,), f"fp6 {kind}", fp6

    for k in (4096,):
        def quant(k=k):
            x = torch.randn(t, k, device=dev, dtype=torch.bfloat16)
            q = torch.empty(t, k, device=dev, dtype=torch.float8_e4m3fn)
            s = kq.scale_buffer(t, k // 128, dev)
            return (kq._chunk_candidates(k // 128),
                    lambda cfg: (lambda: kq.quantize(x, q, s, 448.0, False, cfg=cfg)), 0.0)

        yield "quantize", ("plain", k, "torch.bfloat16", False), f"quantize k={k}", quant

        def ada(k=k):
            x = torch.randn(t, k, device=dev, dtype=torch.bfloat16)
            m = torch.randn(1, 1, k, device=dev, dtype=torch.bfloat16)
            q = torch.empty(t, k, device=dev, dtype=torch.float8_e4m3fn)
            s = kq.scale_buffer(t, k // 128, dev)
            mp = chk.two_level_rows(m, (1, t))
            return (kq.adanorm_candidates(next_pow2(k // 128), True),
                    lambda cfg: (lambda: kq.quantize_adanorm(x, mp, mp, q, s, 1e-6, 448.0, cfg=cfg)), 0.0)

        yield "quantize", ("adanorm", k, "torch.bfloat16", "shared_mod"), f"adanorm k={k}", ada

        def gated(k=k, nh=32):
            x = torch.randn(t, k, device=dev, dtype=torch.bfloat16)
            lg = torch.randn(t, nh, device=dev, dtype=torch.bfloat16)
            q = torch.empty(t, k, device=dev, dtype=torch.float8_e4m3fn)
            s = kq.scale_buffer(t, k // 128, dev)
            return (kq._chunk_candidates(k // 128),
                    lambda cfg: (lambda: kq.gated_attention(x, lg, q, s, nh, 448.0, True, cfg=cfg)), 0.0)

        yield "quantize", ("gated", k, 32, "torch.bfloat16", True), f"gated_attention k={k}", gated


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ltx_kernels.warmup", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=_shapes, help="comma-separated MxNxK GEMM shapes instead of the LTX-2 set "
                                                   "(M >= 1; N and K multiples of 128)")
    ap.add_argument("--quick", action="store_true", help="only the GEMM shapes of the H200 anchors and 3000x2176x7168")
    ap.add_argument("--gemm-only", action="store_true")
    ap.add_argument("--only", help="comma-separated substrings: tune only the jobs whose label has one (e.g. adanorm)")
    ap.add_argument("--check", action="store_true", help="report cached/shipped/missing configs, tune nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every candidate's time")
    args = ap.parse_args(argv)

    from ltx_kernels import tuning
    from ltx_kernels.triton import prepare

    shapes = args.shapes or gemm_shapes(args.quick)
    if args.check:
        return check(shapes, args)
    if not torch.cuda.is_available():
        print("warmup needs a CUDA device (configs are tuned per GPU); --check reports the caches without one",
              file=sys.stderr)
        return 2
    prepare()
    dev = torch.device("cuda")
    jobs = list(_gemm_jobs(shapes, dev)) + list(_backend_jobs(shapes, dev))
    if not args.gemm_only and not args.shapes:
        jobs += list(_memory_jobs(dev))
    jobs = _only(jobs, args.only)
    print(f"device: {tuning.device_name(dev)}; cache: {tuning.cache_dir()}; {len(jobs)} kernel/shape pairs")
    rows = []
    seen = set()
    for i, (kernel, key, label, make) in enumerate(jobs):
        if (kernel, key) in seen:
            continue
        seen.add((kernel, key))
        t0 = time.time()
        cands, run, flops = make()
        cfg, ms = tuning.tune(kernel, key, cands, run, dev, verbose=args.verbose)
        rate = f"{flops / ms / 1e9:7.1f} TFLOP/s" if flops else ""
        rows.append((kernel, label, cfg, ms, rate))
        print(f"[{i + 1}/{len(jobs)}] {kernel:14s} {label:28s} {ms * 1e3:9.1f} us {rate}  ({time.time() - t0:.0f}s)",
              flush=True)
        torch.cuda.empty_cache()
    print("\nchosen configs:")
    for kernel, label, cfg, ms, rate in rows:
        print(f"  {kernel:14s} {label:28s} {ms * 1e3:9.1f} us {rate}  {cfg}")
    return 0


def _only(jobs, only):
    if not only:
        return jobs
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    return [j for j in jobs if any(w in j[2] for w in wanted)]


def check(shapes, args) -> int:
    """Per device: which of the warmup's configs are in the user cache, shipped with the package, or
    missing (the kernel's heuristic then picks). Reads files only. Exit code 1 when configs are
    missing for the visible GPU (what the warmup would tune here), else 0."""
    from ltx_kernels import gemm, tuning

    gpu = tuning.device_name(torch.device("cuda")) if torch.cuda.is_available() else None
    sm90 = gpu is not None and torch.cuda.get_device_capability() == (9, 0)
    devices = tuning.known_devices()
    if gpu is not None and gpu not in devices:
        devices.insert(0, gpu)
    print(f"shipped configs: {tuning.shipped_dir()}\nuser cache: {tuning.cache_dir()}\n"
          f"visible GPU: {gpu or 'none'}")
    if not devices:
        print("no device has shipped or cached configs")
        return 0
    missing_here = 0
    for dev in devices:
        shipped, cached = tuning.tables(dev)
        jobs = list(_gemm_jobs(shapes, None))
        if (dev == gpu and sm90) or any(k.startswith(gemm.BACKEND_CHOICE + "|") for k in (*shipped, *cached)):
            jobs += list(_backend_keys(shapes))
        if not args.gemm_only and not args.shapes:
            jobs += list(_memory_jobs(None))
        jobs = _only(jobs, args.only)
        counts = {"cached": 0, "shipped": 0, "missing": 0}
        print(f"\ndevice {dev}" + (" (the visible GPU)" if dev == gpu else "") + ":")
        seen = set()
        for kernel, key, label, _ in jobs:
            k = tuning.entry_key(kernel, key)
            if k in seen:
                continue
            seen.add(k)
            where = "cached" if k in cached else "shipped" if k in shipped else "missing"
            counts[where] += 1
            note = " (overrides the shipped one)" if where == "cached" and k in shipped else ""
            print(f"  {kernel:20s} {label:28s} {where.upper() if where == 'missing' else where}{note}")
        print(f"  {counts['cached']} cached, {counts['shipped']} shipped, {counts['missing']} missing")
        if dev == gpu:
            missing_here = counts["missing"]
    return 1 if missing_here else 0


if __name__ == "__main__":
    sys.exit(main())
