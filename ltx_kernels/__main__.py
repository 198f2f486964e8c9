"""``python -m ltx_kernels``: versions, backends per op (and why not), self-check, quick benchmark."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def _versions(torch) -> list[str]:
    lines = [f"python {platform.python_version()}  torch {torch.__version__}"]
    try:
        import triton

        lines[0] += f"  triton {triton.__version__}"
    except ImportError:
        lines[0] += "  triton: not installed"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        lines.append(f"device: {p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
                     f"{p.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}")
    else:
        lines.append("device: CPU only (no CUDA device visible)")
    lines.append(f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')}  "
                 f"LTX_KERNELS_BACKEND={os.environ.get('LTX_KERNELS_BACKEND', 'auto')}")
    return lines


def _time_ms(fn, cuda: bool, budget_s: float = 0.5) -> float:

    fn()
    if cuda:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 20):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ltx_kernels", description=__doc__)
    ap.add_argument("--no-bench", action="store_true", help="skip the quick benchmark")
    ap.add_argument("--no-interpret", action="store_true",
                    help="on a CPU-only machine, do not run the Triton kernels under TRITON_INTERPRET=1")
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.no_interpret and "TRITON_INTERPRET" not in os.environ:
        # Kernel modules are imported lazily, so this still takes effect here.
        os.environ["TRITON_INTERPRET"] = "1"
        print("no CUDA device: running the Triton kernels under the interpreter (TRITON_INTERPRET=1)")

    import ltx_kernels
    from ltx_kernels import _cases, _ext

    print(f"ltx_kernels {ltx_kernels.__version__}")
    for line in _versions(torch):
        print("  " + line)
    print("extensions:")
    for name, what in _ext.EXTENSIONS.items():
        mod, why = _ext.load(name)
        print(f"  {name:14s} {'built' if mod else 'missing'}: {what}" + ("" if mod else f" ({why})"))

    dev = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    print(f"\nbackends per op on {dev} (first available is what 'auto' picks, unless the tuning cache"
          f" measured another faster for a shape: the GEMM's fp8_gemm_nt_backend records):")
    inputs = {}
    for case in _cases.CASES:
        d = case.make(dev, False)
        inputs[case.name] = d
        probe = _probe_args(case.name, d)
        reasons = case.op.why_not(*probe)
        parts = []
        for be in ("cuda", "triton", "torch"):
            r = reasons[be]
            parts.append(f"{be}: ok" if not r else f"{be}: no ({'; '.join(r)})")
        print(f"  {case.name:22s} " + " | ".join(parts))

    print("\nself-check against the torch reference (fresh random inputs):")
    failures = 0
    for case in _cases.CASES:
        d = inputs[case.name]
        want = case.reference(d)
        avail = [be for be, r in case.op.why_not(*_probe_args(case.name, d)).items() if not r and be != "torch"]
        for be in avail:
            try:
                got = case.run(d, be)
                err = case.check(got, want)
            except Exception as e:  # report, keep going
                err = f"{type(e).__name__}: {e}"
            failures += err is not None
            print(f"  {case.name:22s} {be:7s} {'PASS' if err is None else 'FAIL: ' + err}")
        if not avail:
            print(f"  {case.name:22s} (only the torch reference is available here)")

    if not args.no_bench:
        big = cuda
        print(f"\nquick benchmark ({'GPU, LTX-2 sizes' if big else 'CPU, small sizes: interpreter timings are not speed'}):")
        print(f"  {'op':22s} {'backend':8s} {'ms':>9s} {'GB/s':>8s} {'TFLOP/s':>8s}")
        for case in _cases.CASES:
            d = case.make(dev, big) if big else inputs[case.name]
            nbytes, flops = case.traffic(d)
            for be, r in case.op.why_not(*_probe_args(case.name, d)).items():
                if r:
                    continue
                try:
                    ms = _time_ms(lambda: case.run(d, be), cuda)
                except Exception as e:
                    print(f"  {case.name:22s} {be:8s} failed: {type(e).__name__}: {e}")
                    continue
                gbs = nbytes / ms / 1e6
                tfl = flops / ms / 1e9 if flops else float("nan")
                print(f"  {case.name:22s} {be:8s} {ms:9.3f} {gbs:8.1f} {tfl:8.1f}")
            del d
    failures += _all2all_section(torch, cuda, not args.no_bench)
    print("\nall checks passed" if not failures else f"\n{failures} check(s) FAILED")
    return 1 if failures else 0


def _all2all_section(torch, cuda: bool, bench: bool) -> int:
    """All2All: which backend a node-local group would get; on a GPU with the extension, a
    self-check and a quick bench of 2 ranks hosted by this process (one GPU)."""
    from ltx_kernels import _ext, reference
    from ltx_kernels.all2all import All2All

    mod, why = _ext.load("_C_all2all")
    print("\nAll2All (head redistribution):")
    print(f"  cuda : {'ok (CUDA-IPC kernels, ranks of one node)' if mod and cuda else 'no (' + (why or 'no CUDA device') + ')'}")
    print("  torch: ok under torch.distributed (NCCL / gloo); tested with gloo processes by the test suite")
    if not (mod and cuda):
        return 0
    world, tokens, h, d = 2, 16384, 32, 128
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counts = [tokens // world + 100, tokens // world - 100]
    ranks = All2All.local_ranks(world, max(counts), h * d, sms // world, torch.bfloat16)
    streams = [torch.cuda.Stream() for _ in ranks]
    for a in ranks:
        a.set_rank_tokens(counts)
    xs = [torch.randn(1, c, h, d, device="cuda", dtype=torch.bfloat16) for c in counts]

    def run(op, inputs, copy_out=True):
        return All2All.run_local(ranks, streams, op, inputs, copy_out=copy_out)

    ys = run("send_recv_heads", xs)
    back = run("gather_heads", ys)
    ok = all(torch.equal(y, w) for y, w in zip(ys, reference.send_recv_heads(xs))) and \
        all(torch.equal(b, x) for b, x in zip(back, xs))
    print(f"  self-check (2 ranks on this GPU, uneven counts): {'PASS' if ok else 'FAIL'}")
    if bench:
        import triton.testing

        ms = triton.testing.do_bench(lambda: (run("send_recv_heads", xs, False), run("gather_heads", ys, False)),
                                     warmup=10, rep=100, return_mode="median")
        nbytes = 2 * 2 * tokens * h * d * 2  # two ops, each byte read and written once
        print(f"  send+gather [1, {tokens}/2, {h}, {d}] bf16 x2 ranks: {ms:.3f} ms, {nbytes / ms / 1e6:.0f} GB/s "
              f"(copy_out=False)")
    for a in ranks:
        a.destroy()
    return 0 if ok else 1


def _probe_args(name: str, d: dict):
    """The positional arguments each op's backend checks take."""
    if name in ("rms_norm_rope", "rms_norm_split_rope"):
        return (d["x"], d["c"], d["s"], d["w"], False, 1e-6)
    if name == "fp6_pack":
        return (d["x"],)
    if name == "fp6_unpack":
        return (d["p"], d["p"].shape[-1] // 3 * 4)
    if name == "quantize_blockwise":
        return (d["x"], 448.0, False)
    if name == "quantize_adanorm":
        return (d["x"], d["scale"], d["shift"], 1e-6, 448.0)
    if name == "fp8_gemm_nt":
        return (d["a"], d["sa"], d["b"], d["sb"], d["bias"], d["a"].new_empty(0))
    raise KeyError(name)


if __name__ == "__main__":
    sys.exit(main())
