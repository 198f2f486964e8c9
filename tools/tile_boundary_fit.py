"""Split SM90 GEMM cycles into a K loop and a tile boundary: per kernel of a table from
tools/ncu_cycles.py, fit cycles / waves = K blocks x c + t (c: cycles a 128-K block, t: cycles a
tile spends outside its K loop: epilogue, tile start, pipeline bubbles) by least squares over
the shapes with at least --min-kb K blocks, and show how the other shapes sit against it.

    python tools/tile_boundary_fit.py bench/results/2026-12-05-h200-sm90-packed-epilogue/tiles_ncu_cycles.txt

A kernel's tile comes from its row name (``pk@256x128x2``); ``deep_gemm`` is LTX-2's vendored
kernel, 256x128 tiles in 2-CTA clusters at every shape it takes; rows with no known tile (the
extension's own pick) are left out. Waves are the busiest CTA's work units: persistent CTAs, one
per SM (one cluster per pair of SMs), units of one tile (a cluster's tiles side by side).
"""
from __future__ import annotations

import argparse
import pathlib
import re

_TILE = re.compile(r"@(\d+)x(\d+)x(\d+)$")
DEEP_GEMM_TILE = (256, 128, 2)


def read_table(text: str) -> tuple[list[str], dict[str, list[int | None]]]:
    """(shapes, {kernel: cycles per shape}) of an ncu_cycles.py table; None where a kernel has no
    value ("-": deep_gemm at N, K it refuses)."""
    shapes, rows = [], {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("kernel"):
            shapes = line.split()[1:]
            continue
        if not shapes:
            raise ValueError("no header line (kernel SHAPE ...) before the first row")
        fields = line.split()
        rows[" ".join(fields[:-len(shapes)])] = [None if v == "-" else int(v.replace(",", ""))
                                                 for v in fields[-len(shapes):]]
    return shapes, rows


def tile_of(kernel: str) -> tuple[int, int, int] | None:
    if kernel == "deep_gemm":
        return DEEP_GEMM_TILE
    m = _TILE.search(kernel)
    return tuple(int(v) for v in m.groups()) if m else None


def waves(shape: str, tile: tuple[int, int, int], sms: int) -> int:
    """Work units of the busiest CTA (the host's model of the persistent grid, ltx_kernels.gemm)."""
    from ltx_kernels.gemm import _sm90_waves

    m, n, _ = (int(v) for v in shape.split("x"))
    return _sm90_waves(m, n, tile, sms)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (c, t) of y = kb * c + t over (kb, y) points with at least two K-block counts."""
    if len({k for k, _ in points}) < 2:
        raise ValueError("the fit needs shapes with at least two K-block counts (of --min-kb or more)")
    n = len(points)
    mx = sum(k for k, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((k - mx) ** 2 for k, _ in points)
    c = sum((k - mx) * (y - my) for k, y in points) / sxx
    return c, my - c * mx


def boundary_fit(text: str, sms: int = 132, min_kb: int = 32) -> list[dict]:
    shapes, rows = read_table(text)
    out = []
    for kernel, cycles in rows.items():
        tile = tile_of(kernel)
        if tile is None:
            continue
        per_tile = {s: cyc / waves(s, tile, sms) for s, cyc in zip(shapes, cycles) if cyc is not None}
        kb = {s: int(s.split("x")[2]) // 128 for s in shapes}
        c, t = fit([(kb[s], y) for s, y in per_tile.items() if kb[s] >= min_kb])
        out.append({"kernel": kernel, "c": c, "t": t,
                    "residual": {s: per_tile[s] / (kb[s] * c + t) - 1 if s in per_tile else None for s in shapes}})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", type=pathlib.Path, help="a table written by tools/ncu_cycles.py --out")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--min-kb", type=int, default=32, help="fit over shapes with at least this many K blocks")
    args = ap.parse_args()
    try:
        res = boundary_fit(args.table.read_text(), args.sms, args.min_kb)
    except ValueError as e:
        raise SystemExit(f"{args.table}: {e}") from None
    shapes = list(res[0]["residual"]) if res else []
    width = max([len(r["kernel"]) for r in res] + [6]) + 2
    print(f"{'kernel':{width}s}{'c':>7s}{'t':>8s}" + "".join(f"{s:>18s}" for s in shapes)
          + "   (per-tile cycles over the fit, -1)")
    for r in res:
        print(f"{r['kernel']:{width}s}{r['c']:7.0f}{r['t']:8.0f}"
              + "".join(f"{'-':>18s}" if r["residual"][s] is None else f"{r['residual'][s]:+18.3f}" for s in shapes))


if __name__ == "__main__":
    main()
