"""A model (not a measurement) of the DRAM bytes an SM90 GEMM's tile order costs: the persistent
grid's work units run in lockstep waves of one unit per CTA (per cluster), each wave streaming
its K blocks in order; every A and B chunk (tile rows or columns x 128 K) a wave touches goes
through an LRU cache of the given capacity, a miss reads the chunk from DRAM. The output is
written once (M x N bf16) whatever the order. The orders are the kernel's (groups of row blocks
walk the column groups, `unit_coords` in csrc/gemm_sm90) and tools/sm90_kernel_variant.py's
`ngroup` (groups of column groups walk the row blocks, deep_gemm's order when it multicasts A).

    python tools/l2_tile_order.py [--shape 32768x4096x4096] [--capacity-mb 20,25,50]

Against Nsight Compute's DRAM bytes at 32768x4096x4096 (deep_gemm, ordered like `ngroup8`, 589
MB; ours 192x128x1 654, 256x128x2 702: bench/results/2026-12-04-h200-sm90-cluster-wait-variants)
the model ranks the three as measured with a capacity of 20 MB, under half the H200's L2 (its two
partitions, the output's writes): 564 / 742 / 806 MB; at 25 MB it puts 256x128x2 before
192x128x1; at 40-50 MB it finds the kernel's order at the minimum (151 MB of operands) and
`ngroup` reading A once per column group. A guide for what to time, not a prediction.
"""
from __future__ import annotations

import argparse
import collections


def rows_walk_columns(num_m: int, num_groups: int, group: int = 8) -> list[tuple[int, int]]:
    """The kernel's order: groups of `group` row blocks walk the column groups."""
    out = []
    for u in range(num_m * num_groups):
        per = group * num_groups
        first = u // per * group
        size = min(num_m - first, group)
        i = u % per
        out.append((first + i % size, i // size))
    return out


def columns_walk_rows(num_m: int, num_groups: int, group: int = 16) -> list[tuple[int, int]]:
    """`ngroup`: groups of `group` column groups walk the row blocks (the kernel's order, transposed)."""
    return [(m, g) for g, m in rows_walk_columns(num_groups, num_m, group)]


def dram_read_mb(m: int, n: int, k: int, bm: int, bn: int, cluster: int, order, capacity_mb: float,
                 sms: int = 132) -> float:
    num_m, num_n = -(-m // bm), -(-n // bn)
    units = order(num_m, -(-num_n // cluster))
    concurrent = sms // cluster
    cache: collections.OrderedDict = collections.OrderedDict()
    capacity, used, missed = capacity_mb * 2 ** 20, 0, 0

    def touch(key, nbytes):
        nonlocal used, missed
        if key in cache:
            cache.move_to_end(key)
            return
        missed += nbytes
        cache[key] = nbytes
        used += nbytes
        while used > capacity:
            used -= cache.popitem(last=False)[1]

    for w in range(0, len(units), concurrent):
        wave = units[w:w + concurrent]
        for kb in range(k // 128):
            for m_blk, grp in wave:
                touch(("A", m_blk, kb), bm * 128)
                for c in range(cluster):
                    if grp * cluster + c < num_n:
                        touch(("B", grp * cluster + c, kb), bn * 128)
    return missed / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="32768x4096x4096")
    ap.add_argument("--capacity-mb", default="20,25,50")
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    cases = [("192x128x1, kernel order", 192, 128, 1, rows_walk_columns),
             ("192x128x1, ngroup", 192, 128, 1, columns_walk_rows),
             ("192x128x1, ngroup32", 192, 128, 1, lambda a, b: columns_walk_rows(a, b, 32)),
             ("256x128x1, kernel order", 256, 128, 1, rows_walk_columns),
             ("256x128x2, kernel order", 256, 128, 2, rows_walk_columns),
             ("256x128x2, ngroup8", 256, 128, 2, lambda a, b: columns_walk_rows(a, b, 8))]
    out_mb = m * n * 2 / 1e6
    for cap in (float(v) for v in args.capacity_mb.split(",")):
        print(f"cache {cap:g} MB: operands read (output {out_mb:.0f} MB written on top)")
        for name, bm, bn, cl, order in cases:
            reads = dram_read_mb(m, n, k, bm, bn, cl, order, cap)
            print(f"  {name:26s} {reads:6.0f} MB, with the output {reads + out_mb:6.0f} MB")


if __name__ == "__main__":
    main()
