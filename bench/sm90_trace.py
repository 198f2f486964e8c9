"""Summarise a trace written by a -DLTX_SM90_TRACE standalone build (LTX_SM90_TRACE_FILE=path).

The trace holds, for CTA 0, K blocks 32..55 of its stream, each consumer warp's SM clock at: acquire
begins, stage acquired, ready to issue, issued, wgmma done, promoted (per wave), and the producer's
TMA issue time per K block. Printed: per consumer the median cycles of each phase, the skew between
the warps of a warpgroup, and the tensor-core idle time implied by the issue/done times.
    python bench/sm90_trace.py trace.bin WAVES [CONSUMERS]
"""
import struct
import sys
from statistics import median

CONSUMERS, WARPS, BLOCKS, WAVES_MAX, POINTS = 3, 4, 24, 2, 6


def main(path, waves, consumers=2):
    raw = open(path, "rb").read()
    n = CONSUMERS * WARPS * BLOCKS * WAVES_MAX * POINTS
    vals = struct.unpack(f"<{n}I{BLOCKS}I", raw[: 4 * (n + BLOCKS)])
    tr, prod = vals[:n], vals[n:]

    def at(c, w, g, v, p):
        return tr[((((c * WARPS + w) * BLOCKS + g) * WAVES_MAX + v) * POINTS) + p]

    t0 = min(at(c, w, 0, 0, 0) for c in range(consumers) for w in range(4))
    rel = lambda x: (x - t0) & 0xFFFFFFFF
    for c in range(consumers):
        ph = {"acquire": [], "ready->issued": [], "issued->done": [], "done->promoted": [], "promoted->next ready": []}
        skew_issue, skew_prom = [], []
        for g in range(1, BLOCKS - 1):
            ph["acquire"].append(rel(at(c, 0, g, 0, 1)) - rel(at(c, 0, g, 0, 0)))
            for v in range(waves):
                ph["ready->issued"].append(rel(at(c, 0, g, v, 3)) - rel(at(c, 0, g, v, 2)))
                ph["issued->done"].append(rel(at(c, 0, g, v, 4)) - rel(at(c, 0, g, v, 3)))
                ph["done->promoted"].append(rel(at(c, 0, g, v, 5)) - rel(at(c, 0, g, v, 4)))
                nxt = (g, v + 1) if v + 1 < waves else (g + 1, 0)
                ph["promoted->next ready"].append(rel(at(c, 0, nxt[0], nxt[1], 2)) - rel(at(c, 0, g, v, 5)))
                prom = [rel(at(c, w, g, v, 5)) for w in range(WARPS)]
                skew_prom.append(max(prom) - min(prom))
                rdy = [rel(at(c, w, g, v, 2)) for w in range(WARPS)]
                skew_issue.append(max(rdy) - min(rdy))
        print(f"consumer {c}: " + ", ".join(f"{k} {median(v):.0f}" for k, v in ph.items())
              + f"; warp skew at ready {median(skew_issue):.0f}, at promoted {median(skew_prom):.0f}")
        per_warp = [median(rel(at(c, w, g, v, 5)) - rel(at(c, w, g, v, 4)) for g in range(1, BLOCKS - 1)
                           for v in range(waves)) for w in range(WARPS)]
        print(f"  done->promoted per warp: {[round(x) for x in per_warp]}")
    # tensor-core occupancy: wgmma intervals [issued, done] of warp 0 of both consumers, merged
    iv = sorted((rel(at(c, 0, g, v, 3)), rel(at(c, 0, g, v, 4)))
                for c in range(consumers) for g in range(1, BLOCKS - 1) for v in range(waves))
    busy, end = 0, iv[0][0]
    for s, e in iv:
        s = max(s, end)
        if e > s:
            busy += e - s
            end = e
    span = iv[-1][1] - iv[0][0]
    per_block = span / (BLOCKS - 2)
    print(f"span {span} cycles over {BLOCKS - 2} K blocks: {per_block:.0f} per K block; "
          f"some wgmma in flight {100 * busy / span:.0f}% of the time")
    lag = [rel(at(0, 0, g, 0, 1)) - ((prod[g] - t0) & 0xFFFFFFFF) for g in range(BLOCKS)]
    print(f"producer: TMA issued a median {median(lag):.0f} cycles before consumer 0 acquired the stage "
          f"(min {min(lag)})")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2)
