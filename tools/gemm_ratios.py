"""Throughput ratios between the backends of tools/gemm_protocols.py runs: per shape and protocol,
the mean over the runs of A / B, with each run's value.

    python tools/gemm_ratios.py run1.json run2.json --pairs cuda/deep_gemm,cuda@256x128x2/cuda

With ``--split-clock``, rows of the probed protocols (which measure each backend's SM clock,
``NAME_probe_mhz``) also give each ratio's two factors: the clock ratio and the work per clock
(TFLOP/s over the probed clock), which repeats between runs where throughput and clock do not.

With ``--by-predecessor``, rows of ``interleaved_shuffled`` (each backend's TFLOP/s split by the
backend that ran just before it, ``NAME_after``) also give A / B with both after the same backend
P (``after P``) and A after B over B after A (``after each other``): whether a ratio is the kernels'
own or the neighbour each inherits (L2 contents, power state).

Runs must come from one protocol on one GPU (ratios from different runs compare; absolute TFLOP/s
under the power limit do not, docs/measuring.md).

    python tools/gemm_ratios.py run1.json run2.json --cluster-load-factor

instead derives ``SM90_CLUSTER_UNDER_LOAD`` (ltx_kernels/gemm.py) from runs that time the 2-CTA
tile beside a one-CTA tile, either way round: the host's one-CTA pick (``cuda``) beside the forced
2-CTA tile (``cuda@256x128x2``), or the host's 2-CTA pick beside a forced one-CTA tile
(``cuda@256x128x1``). Per shape whose 2-CTA grid runs at least ``SM90_CLUSTER_MIN_WAVES`` waves:
the measured 2-CTA / one-CTA ratio over the one the host's cycle model predicts (without the
factor), and their geometric mean per protocol.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics


def _fmt(vals: list[float]) -> str:
    return f"{statistics.mean(vals):.3f} ({', '.join(f'{v:.3f}' for v in vals)})" if vals else "-"


def _by_predecessor(rows: list[dict], a: str, b: str) -> str:
    """A / B per common predecessor over the runs' interleaved_shuffled rows (module docstring)."""
    afters = [(r[a + "_after"], r[b + "_after"]) for r in rows if r.get(a + "_after") and r.get(b + "_after")]
    if not afters:
        return ""
    preds = [p for p in afters[0][0] if p in afters[0][1] and p != "start"]
    parts = [f"after {p} {_fmt([x[p] / y[p] for x, y in afters if p in x and p in y])}" for p in preds]
    mutual = [x[b] / y[a] for x, y in afters if b in x and a in y]
    if mutual:
        parts.append(f"after each other {_fmt(mutual)}")
    return " [" + "; ".join(parts) + "]"


def ratios(runs: list[list[dict]], pairs: list[tuple[str, str]], split_clock: bool = False,
           by_predecessor: bool = False) -> list[str]:
    lines = [f"{'shape':18s} {'host tile':12s} {'protocol':9s} " + "  ".join(f"{a}/{b}" for a, b in pairs)]
    keys = []
    for row in runs[0]:
        if (row["shape"], row["protocol"]) not in keys:
            keys.append((row["shape"], row["protocol"]))
    for shape, protocol in keys:
        rows = [r for run in runs for r in run if r["shape"] == shape and r["protocol"] == protocol]
        cells = []
        for a, b in pairs:
            cells.append(_fmt([r[a] / r[b] for r in rows if r.get(a) and r.get(b)]))
            if split_clock and protocol in ("probed", "interleaved_probed"):
                probed = [r for r in rows if r.get(a) and r.get(b) and r.get(a + "_probe_mhz") and r.get(b + "_probe_mhz")]
                clock = [r[a + "_probe_mhz"] / r[b + "_probe_mhz"] for r in probed]
                work = [r[a] / r[b] / c for r, c in zip(probed, clock)]
                cells[-1] += f" = clock {_fmt(clock)} x per clock {_fmt(work)}"
            if by_predecessor and protocol == "interleaved_shuffled":
                cells[-1] += _by_predecessor(rows, a, b)
        lines.append(f"{shape:18s} {rows[0].get('cuda_config', '-'):12s} {protocol:9s} " + "  ".join(cells))
    return lines


def cluster_load_factor(runs: list[list[dict]], num_sms: int = 132) -> list[str]:
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from ltx_kernels import gemm  # here, not at the top: the ratio tables need no torch

    cluster = (256, 128, 2)

    def cfg(text):
        return tuple(int(v) for v in text.split("x"))

    lines, logs = [], {}
    for row in runs[0]:
        if not row.get("cuda_config"):
            continue
        m, n, k = (int(v) for v in row["shape"].split("x"))
        pick = cfg(row["cuda_config"].split("/")[0])
        if pick[2] == 1:
            one, cols = pick, ("cuda@256x128x2", "cuda")
        elif pick == cluster:
            forced = [key for key in row if re.fullmatch(r"cuda@\d+x\d+x1", key)]
            if not forced:
                continue
            one, cols = cfg(forced[0][5:]), ("cuda", forced[0])
        else:
            continue
        if gemm._sm90_waves(m, n, cluster, num_sms) < gemm.SM90_CLUSTER_MIN_WAVES:
            continue
        predicted = (gemm._sm90_cost(m, n, one, num_sms, k // 128, under_load=False)
                     / gemm._sm90_cost(m, n, cluster, num_sms, k // 128, under_load=False))
        rows = [r for run in runs for r in run if r["shape"] == row["shape"] and r["protocol"] == row["protocol"]]
        vals = [r[cols[0]] / r[cols[1]] for r in rows if r.get(cols[0]) and r.get(cols[1])]
        if not vals:
            continue
        measured = statistics.mean(vals)
        logs.setdefault(row["protocol"], []).append(math.log(measured / predicted))
        lines.append(f"{row['shape']:18s} {row['protocol']:9s} one-CTA {one} measured {measured:.3f} "
                     f"predicted {predicted:.3f} ratio {measured / predicted:.3f}")
    for protocol, vals in logs.items():
        lines.append(f"{protocol}: geometric mean {math.exp(statistics.mean(vals)):.3f} over {len(vals)} shapes "
                     f"(range {math.exp(min(vals)):.3f}-{math.exp(max(vals)):.3f})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="JSON files written by gemm_protocols.py --json")
    ap.add_argument("--pairs", default="cuda/deep_gemm", help="A/B,... backend or anchor names")
    ap.add_argument("--split-clock", action="store_true",
                    help="probed rows: each ratio as clock ratio x work-per-clock ratio (module docstring)")
    ap.add_argument("--cluster-load-factor", action="store_true",
                    help="measured over predicted 256x128x2 / one-CTA tile (module docstring)")
    ap.add_argument("--by-predecessor", action="store_true",
                    help="interleaved_shuffled rows: each ratio per backend run just before (module docstring)")
    args = ap.parse_args()
    runs = [json.load(open(path))["rows"] for path in args.runs]
    if args.cluster_load_factor:
        print("\n".join(cluster_load_factor(runs)))
        return
    pairs = [tuple(p.split("/", 1)) for p in args.pairs.split(",")]
    print("\n".join(ratios(runs, pairs, args.split_clock, args.by_predecessor)))


if __name__ == "__main__":
    main()
