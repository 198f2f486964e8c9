"""SM cycles of SM90 GEMM kernels and LTX-2's deep_gemm, one launch each, in one Nsight Compute
profile per shape: work per clock, free of the power state that sets the clock under load (the
same kernel launched twice in one profile has differed by up to 3.4 %).

    python tools/ncu_cycles.py UPSTREAM_PATH --shapes 8192x8192x2048,32768x4096x4096 \\
        [--out cycles.txt] LIB.so@256x128x1 [BMxBNxCL | LIB.so@cfg ...]

Each shape runs tools/upstream/ncu_vs_deep_gemm.py under ncu: the extension's own pick, then the
configs given (a config of the built extension, or of a variant library from ``LIB=1
tools/sm90_build_standalone.sh``), then deep_gemm where it accepts the shape
(``gemm_protocols.deep_gemm_accepts``; "-" elsewhere). Prints one row a kernel and one column a shape.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
_CYCLES = re.compile(r"sm__cycles_elapsed\.max\s+cycle\s+([\d,]+)")


def parse_cycles(text: str) -> list[int]:
    """The sm__cycles_elapsed.max values of an ncu report printed as text, in launch order."""
    return [int(m.group(1).replace(",", "")) for m in _CYCLES.finditer(text)]


def label(spec: str) -> str:
    path, _, cfg = spec.rpartition("@")
    if not path:
        return f"extension@{spec}"
    name = pathlib.Path(path).stem
    return f"{name.removeprefix('libsm90_')}@{cfg}"


def table(labels: list[str], shapes: list[str], cycles: dict[str, list[int]]) -> str:
    width = max(len(s) for s in labels) + 2
    lines = [f"{'kernel':{width}s}" + "".join(f"{s:>18s}" for s in shapes)]
    for i, name in enumerate(labels):
        cells = [f"{cycles[s][i]:>18,d}" if i < len(cycles[s]) else f"{'-':>18s}" for s in shapes]
        lines.append(f"{name:{width}s}" + "".join(cells))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("upstream_path", help="the folder tools/upstream/build_upstream.sh prints")
    ap.add_argument("specs", nargs="+", help="BMxBNxCL (the extension) or LIB.so@BMxBNxCL")
    ap.add_argument("--shapes", default="32768x4096x4096", help="MxNxK,...")
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gemm_protocols import deep_gemm_accepts

    shapes = args.shapes.split(",")
    labels = ["extension (host's pick)"] + [label(s) for s in args.specs] + ["deep_gemm"]
    cycles, expected = {}, {}
    for shape in shapes:
        m, n, k = shape.split("x")
        # the extension's pick, the configs, and deep_gemm where it accepts N and K
        launches = expected[shape] = len(args.specs) + 1 + deep_gemm_accepts(int(n), int(k))
        cmd = [args.ncu, "--clock-control", "none", "-k", "regex:fp8_gemm_kernel|sm90_fp8_gemm_1d2d",
               "-s", str(launches), "-c", str(launches), "--metrics", "sm__cycles_elapsed.max",
               sys.executable, str(HERE / "upstream" / "ncu_vs_deep_gemm.py"), args.upstream_path, m, n, k,
               *args.specs]
        r = subprocess.run(cmd, capture_output=True, text=True)
        cycles[shape] = parse_cycles(r.stdout)
        if r.returncode != 0 or len(cycles[shape]) != launches:
            print(f"{shape}: ncu rc={r.returncode}, {len(cycles[shape])} of {launches} kernels\n{r.stdout[-2000:]}"
                  f"{r.stderr[-2000:]}", file=sys.stderr)
    text = table(labels, shapes, cycles)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(
            "# sm__cycles_elapsed.max, one launch each after a warm-up (ncu --clock-control none)\n" + text + "\n")
    return 0 if all(len(cycles[s]) == expected[s] for s in shapes) else 1


if __name__ == "__main__":
    sys.exit(main())
