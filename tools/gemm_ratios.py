"""Throughput ratios between the backends of tools/gemm_protocols.py runs: per shape and protocol,
the mean over the runs of A / B, with each run's value.

    python tools/gemm_ratios.py run1.json run2.json --pairs cuda/deep_gemm,cuda@256x128x2/cuda

Runs must come from one protocol on one GPU (ratios from different runs compare; absolute TFLOP/s
under the power limit do not, docs/measuring.md).
"""
from __future__ import annotations

import argparse
import json
import statistics


def ratios(runs: list[list[dict]], pairs: list[tuple[str, str]]) -> list[str]:
    lines = [f"{'shape':18s} {'host tile':12s} {'protocol':9s} " + "  ".join(f"{a}/{b}" for a, b in pairs)]
    keys = []
    for row in runs[0]:
        if (row["shape"], row["protocol"]) not in keys:
            keys.append((row["shape"], row["protocol"]))
    for shape, protocol in keys:
        rows = [r for run in runs for r in run if r["shape"] == shape and r["protocol"] == protocol]
        cells = []
        for a, b in pairs:
            vals = [r[a] / r[b] for r in rows if r.get(a) and r.get(b)]
            cells.append(f"{statistics.mean(vals):.3f} ({', '.join(f'{v:.3f}' for v in vals)})" if vals else "-")
        lines.append(f"{shape:18s} {rows[0].get('cuda_config', '-'):12s} {protocol:9s} " + "  ".join(cells))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="JSON files written by gemm_protocols.py --json")
    ap.add_argument("--pairs", default="cuda/deep_gemm", help="A/B,... backend or anchor names")
    args = ap.parse_args()
    runs = [json.load(open(path))["rows"] for path in args.runs]
    pairs = [tuple(p.split("/", 1)) for p in args.pairs.split(",")]
    print("\n".join(ratios(runs, pairs)))


if __name__ == "__main__":
    main()
