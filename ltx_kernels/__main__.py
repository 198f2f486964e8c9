"""``python -m ltx_kernels``: versions, the CUDA extensions, the backend each op takes here (and why
not the others), a self-check of every public op against the reference, a quick benchmark on a GPU.

``python -m ltx_kernels build``: compile the CUDA extensions now (see ``build --help``).
Exit code 1 when a check or a build fails.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
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


def _time_ms(fn) -> float:
    import triton.testing

    fn()
    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def _extensions_section(torch, cuda: bool) -> None:
    from ltx_kernels import _ext, _jit

    tc = _jit.toolchain()
    print(f"\nCUDA extensions (prebuilt by setup.py, else compiled on first use into {_jit.extensions_dir()}):")
    print(f"  toolchain: {tc.summary()}")
    for name, what in _ext.EXTENSIONS.items():
        try:
            if cuda:
                _ext.load(name)  # the first use: compiles here if need be (one line when it starts)
                line = _ext.status(name) if _ext.info(name) else _ext.load(name)[1]
            else:
                line = _ext.status(name)
        except ValueError as e:  # a setting, e.g. TORCH_CUDA_ARCH_LIST, that names no arch
            line = f"cannot be built or loaded: {e}"
        print(f"  {name:14s} {what}:\n      {line}")


_ORDER = ("cuda", "triton", "torch", "auto")


def _backends_section(cases, inputs, dev) -> list:
    """Prints each op's backends; returns the ops a call without backend= could not run here."""
    print(f"\nbackends per op on {dev} ('auto' takes the first of cuda, triton, torch that can run the "
          f"inputs, unless the tuning cache measured another faster for the shape):")
    stuck = []
    for case in cases:
        d = inputs[case.name]
        parts = []
        for be, r in sorted(case.why_not(d).items(), key=lambda kv: _ORDER.index(kv[0])):
            if r and r[0].startswith("not implemented"):
                parts.append(f"{be}: -")
            else:
                parts.append(f"{be}: ok" if not r else f"{be}: no ({'; '.join(r)})")
        chosen = case.auto(d)
        if chosen == "none":
            stuck.append(case.name)
        print(f"  {case.name:26s} auto -> {chosen}\n      " + " | ".join(parts))
    if stuck:
        print(f"  with LTX_KERNELS_BACKEND={os.environ.get('LTX_KERNELS_BACKEND')}, a call without backend= "
              f"raises BackendUnavailable for: {', '.join(stuck)}")
    return stuck


def _self_check(cases, inputs) -> tuple[int, list, list]:
    """Runs every backend each case has against the reference: (checked, skipped, failed)."""
    print("\nself-check against the torch reference (fresh random inputs):")
    checked, skipped, failed = 0, [], []
    for case in cases:
        d = inputs[case.name]
        want = case.reference(d)
        for be, r in sorted(case.checked_backends(d), key=lambda kv: _ORDER.index(kv[0])):
            if r:
                skipped.append((case.name, be, "; ".join(r)))
                print(f"  {case.name:26s} {be:7s} skipped: {'; '.join(r)}")
                continue
            try:
                err = case.check(case.run(d, be), want)
            except Exception as e:  # report, keep going
                err = f"{type(e).__name__}: {e}"
            checked += 1
            if err is not None:
                failed.append((case.name, be, err))
            print(f"  {case.name:26s} {be:7s} {'PASS' if err is None else 'FAIL: ' + err}")
    return checked, skipped, failed


def summary(checked: int, skipped: list, failed: list) -> str:
    """The closing line(s). Says "all checks passed" only when every backend was checked."""
    lines = []
    if skipped:
        why = "; ".join(f"{op} {be}: {r}" for op, be, r in skipped)
        lines.append(f"{checked} checked, {len(skipped)} skipped ({why})")
    else:
        lines.append(f"{checked} checked, 0 skipped")
    if failed:
        lines.append(f"{len(failed)} FAILED: " + "; ".join(f"{op} {be}: {e}" for op, be, e in failed))
    elif skipped:
        lines.append("no failures; not every backend could be checked here (see the skips)")
    elif checked:
        lines.append("all checks passed")
    else:
        lines.append("nothing was checked")
    return "\n".join(lines)


def _bench_section(torch, cases, dev) -> None:
    print("\nquick benchmark (GPU, LTX-2 sizes; median of do_bench, L2 flushed):")
    print(f"  {'op':26s} {'backend':8s} {'ms':>9s}  rate")
    for case in cases:
        if case.traffic is None:
            continue
        d = case.make(dev, True)
        nbytes, flops = case.traffic(d)
        for be, r in case.checked_backends(d):
            if r:
                continue
            try:
                ms = _time_ms(lambda d=d, be=be: case.run(d, be))
            except Exception as e:
                print(f"  {case.name:26s} {be:8s} failed: {type(e).__name__}: {e}")
                continue
            rate = f"{flops / ms / 1e9:8.1f} TFLOP/s" if flops else f"{nbytes / ms / 1e6:8.1f} GB/s"
            print(f"  {case.name:26s} {be:8s} {ms:9.3f}  {rate}")
        d = None  # free the LTX-2-sized inputs before the next case's
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["build"]:
        return build_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m ltx_kernels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-bench", action="store_true", help="skip the quick benchmark (GPU only)")
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
    from ltx_kernels import _cases
    from ltx_kernels._dispatch import resolve_backend_name

    try:
        resolve_backend_name(None)  # LTX_KERNELS_BACKEND: every op would raise with a bad one
    except ValueError as e:
        print(f"python -m ltx_kernels: error: {e}", file=sys.stderr)
        return 2

    print(f"ltx_kernels {ltx_kernels.__version__}")
    for line in _versions(torch):
        print("  " + line)
    _extensions_section(torch, cuda)

    dev = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    cases = _cases.CASES
    inputs = {case.name: case.make(dev, False) for case in cases}
    stuck = _backends_section(cases, inputs, dev)
    checked, skipped, failed = _self_check(cases, inputs)
    failed += [(name, "default", "no backend can run it (LTX_KERNELS_BACKEND)") for name in stuck]
    n_failed = len(failed)
    if cuda:
        n_failed += _all2all_section(torch, not args.no_bench)
        if not args.no_bench:
            _bench_section(torch, cases, dev)
    elif not args.no_bench:
        print("\nquick benchmark: needs a GPU (here the Triton kernels run under the interpreter, whose "
              "timings say nothing about their speed)")
    print("\n" + summary(checked, skipped, failed))
    if n_failed > len(failed):
        print("the All2All 2-rank check FAILED")
    return 1 if n_failed else 0


def _all2all_section(torch, bench: bool) -> int:
    """On a GPU with the extension: a self-check and a quick bench of 2 ranks hosted by this
    process (one GPU), uneven token counts."""
    from ltx_kernels import _ext, reference
    from ltx_kernels.all2all import All2All

    mod, why = _ext.load("_C_all2all")
    print("\nAll2All, 2 ranks on this GPU (CUDA-IPC kernels):")
    if mod is None:
        print(f"  skipped: {why}")
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
    print(f"  self-check (uneven counts): {'PASS' if ok else 'FAIL'}")
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


# --------------------------------------------------------------------------------------- build

def _ninja_step(line: str) -> str | None:
    """A ninja status line ("[2/3] /usr/local/cuda/bin/nvcc ... -c /x/kernel.cu -o ...") shortened
    to "[2/3] nvcc kernel.cu"; None for any other output (it stays in build.log)."""
    m = re.match(r"\s*\[(\d+)/(\d+)\]\s+(\S+)(.*)", line)
    if not m:
        return None
    rest = m.group(4)
    src = re.search(r"\s-c\s+(\S+)", rest)
    out = re.search(r"\s-o\s+(\S+)", rest)
    what = os.path.basename(src.group(1)) if src else (f"-> {os.path.basename(out.group(1))}" if out else "")
    return f"[{m.group(1)}/{m.group(2)}] {os.path.basename(m.group(3))} {what}".rstrip()


def _print_step(line: str) -> None:
    step = _ninja_step(line)
    if step:
        print("    " + step, flush=True)


def build_main(argv) -> int:
    from ltx_kernels import _build_config as cfg

    ap = argparse.ArgumentParser(
        prog="python -m ltx_kernels build",
        description="Compile the CUDA extensions now, with progress, into the cache the package loads "
                    "them from (what the first use would otherwise do). Arches: the visible GPUs; "
                    "without one, TORCH_CUDA_ARCH_LIST (e.g. 9.0), else setup.py's default list.")
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"extensions (default: all of {sorted(cfg.EXTENSIONS)})")
    ap.add_argument("--arch", help="arches to compile for instead, TORCH_CUDA_ARCH_LIST syntax (e.g. '9.0')")
    ap.add_argument("--force", action="store_true", help="compile again even when a build is cached")
    ap.add_argument("--check", action="store_true",
                    help="compile nothing: load each extension from setup.py's build or the cache; "
                         "exit 1 if one is missing")
    args = ap.parse_args(argv)
    for n in args.names:
        if n not in cfg.EXTENSIONS:
            ap.error(f"unknown extension {n!r} (have: {', '.join(cfg.EXTENSIONS)})")
    names = args.names or list(cfg.EXTENSIONS)

    from ltx_kernels import _ext, _jit

    tc = _jit.toolchain()
    print(f"toolchain: {tc.summary()}")
    if args.arch:
        try:
            archs, origin = cfg.parse_arch_list(args.arch), "--arch"
        except ValueError as e:
            ap.error(str(e))
    elif tc.why is None:
        try:
            archs, origin = _jit.wanted_archs()
        except ValueError as e:  # TORCH_CUDA_ARCH_LIST
            ap.error(str(e))
    else:
        archs, origin = [], ""
    if archs:
        print(f"arches: {', '.join(cfg.sm(a) for a in archs)} (from {origin})")
    print(f"cache: {_jit.extensions_dir()}")
    bad = 0
    for i, name in enumerate(names, 1):
        s = cfg.spec(name)
        head = f"[{i}/{len(names)}] {name}"
        mod, pre_why = _ext._prebuilt(name)
        if mod is not None:
            print(f"{head}: prebuilt by setup.py ({mod.__file__}); nothing to compile")
            continue
        if archs and not cfg.targets(s, archs):
            print(f"{head}: skipped: built for {cfg.sm(s.only_arch)} only, not among the arches")
            continue
        if args.check:
            path, meta = _jit.ensure(name, archs=archs or None, compile=False)
        else:
            p, why = _jit.plan(name, archs or None)
            hit = None if (p is None or args.force) else _jit.cached(p)
            failed_before = p is not None and not args.force and (p.folder / "failed.json").exists()
            if p is not None and hit is None and not failed_before:
                print(f"{head}: compiling for {', '.join(cfg.sm(a) for a in p.targets)} into {p.folder}", flush=True)
            t0 = time.time()
            path, meta = _jit.ensure(name, archs=archs or None, force=args.force, announce=False,
                                     progress=_print_step)
            if path is not None and meta.get("fresh"):
                print(f"    done in {time.time() - t0:.0f} s")
        if path is None:
            bad += 1
            print(f"{head}: FAILED: {meta}")
            continue
        try:
            _jit.import_module(name, path)
        except ImportError as e:
            bad += 1
            print(f"{head}: built but failed to import: {e}")
            continue
        state = "compiled" if meta.get("fresh") else "cached"
        print(f"{head}: {state} for {', '.join(cfg.sm(a) for a in meta['targets'])}, imports ({path})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
