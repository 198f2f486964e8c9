"""Tabulate tools/ncu_l2_traffic.sh's CSVs: one row a profiled launch, in launch order (the host's
pick, the specs as given, deep_gemm), with MB for byte and sector counts.

    python tools/ncu_l2_table.py OUT/l2_512x4096x4096.csv [--labels pick,128x128x1,...]
"""
from __future__ import annotations

import argparse
import csv
import re

COLUMNS = [  # (heading, metric, scale)
    ("us", "gpu__time_duration.sum", 1e-3),  # ns
    ("elapsed kcyc", "sm__cycles_elapsed.max", 1e-3),
    ("active min / mean / max kcyc", ("sm__cycles_active.min", "sm__cycles_active.avg", "sm__cycles_active.max"), 1e-3),
    ("L2 read MB", "lts__t_sectors_srcunit_tex_op_read.sum", 32e-6),
    ("L2 read miss MB", "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum", 32e-6),
    ("ltcfabric MB", "lts__t_sectors_srcunit_ltcfabric.sum", 32e-6),
    ("DRAM read / write MB", ("dram__bytes_read.sum", "dram__bytes_write.sum"), 1e-6),
    ("to SMs MB", "l1tex__m_xbar2l1tex_read_bytes.sum", 1e-6),
]

# ncu's units to bytes and nanoseconds (it picks the unit per value); sectors and cycles stay as they are
UNIT_SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1, "usecond": 1e3, "msecond": 1e6}


def launches(path: str) -> list[tuple[str, dict[str, float]]]:
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for r in rows:
        name, metrics = out.setdefault(r["ID"], (r["Kernel Name"], {}))
        value = float(r["Metric Value"].replace(",", ""))
        metrics[r["Metric Name"]] = value * UNIT_SCALE.get(r["Metric Unit"], 1)
    return [out[k] for k in sorted(out, key=int)]


def short(name: str) -> str:
    m = re.search(r"fp8_gemm_kernel<\(int\)(\d+), \(int\)(\d+), \(int\)(\d+)", name) or re.search(
        r"fp8_gemm_kernel<(\d+), (\d+), (\d+)", name)
    return "ours " + "x".join(m.groups()) if m else ("deep_gemm" if "1d2d" in name else name[:30])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--labels", help="comma-separated names for the launches, in order")
    args = ap.parse_args()
    for path in args.csv:
        runs = launches(path)
        labels = args.labels.split(",") if args.labels else [short(n) for n, _ in runs]
        print(f"\n{path}\n")
        print("| launch | " + " | ".join(h for h, _, _ in COLUMNS) + " |")
        print("|---|" + "---:|" * len(COLUMNS))
        for label, (_, met) in zip(labels, runs):
            cells = []
            for _, key, scale in COLUMNS:
                keys = key if isinstance(key, tuple) else (key,)
                vals = [met.get(k) for k in keys]
                cells.append(" / ".join("-" if v is None else f"{v * scale:,.1f}" for v in vals))
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
