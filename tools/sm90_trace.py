"""The SM90 GEMM's timeline from the inside: runs a library built with the `trace` variant
(``LIB=1 bash tools/sm90_build_standalone.sh L tr:trace= ntr:noepi+trace=``) once at a shape and
reads the event log of its first CTAs (clock64 at each wave's issue, wgmma wait and promotion, the
next stage's acquisition, the epilogue and its boxes, the producer's empty-barrier waits; codes in
tools/sm90_kernel_variant.py). Whole-ring loop only (K / 128 a multiple of the ring depth).

    python tools/sm90_trace.py --shape 8192x8192x2048 L/libsm90_tr.so@256x128x1 L/libsm90_ntr.so@256x128x1

Per consumer it prints, over the CTA's tiles after its first: the tile's period against its K
blocks at the steady block period (the tile boundary's excess, in cycles), the period of each K
block by its place in the tile, the epilogue and its parts, the waits for each stage's data and for
the wgmma; and the share of the span some consumer has a wgmma in flight. Cycles are the SM's
clock64, so they count work per clock as Nsight Compute's cycles do.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import pathlib
import statistics
import sys

ISSUE, ISSUED, WAITED, PROMOTED = 0x10, 0x20, 0x30, 0x40
ACQ_BEGIN, ACQ_END = 0x50, 0x51
EPI_BEGIN, EPI_END, BOX_FREE, BOX_WRITTEN = 0x60, 0x61, 0x62, 0x63
PRODUCER_EMPTY = 0x70
_CLOCK_MASK = (1 << 48) - 1


def decode(words) -> list[tuple[int, int]]:
    """(code, clock) of one role's records, in order, up to the first empty slot. Bits 48-55 of a
    record hold its index mod 256: a record that the kernel overwrote before copying it out breaks
    that count (ValueError)."""
    out = []
    for i, w in enumerate(words):
        w = int(w)
        if w == 0:
            break
        if (w >> 48) & 255 != i % 256:
            raise ValueError(f"record {i} carries index {(w >> 48) & 255}: records were lost")
        out.append((w >> 56, w & _CLOCK_MASK))
    return out


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def consumer_blocks(events: list[tuple[int, int]]) -> list[dict]:
    """The consumer's K blocks in stream order: per block its start (first wave's issue), its
    events, and whether a tile's epilogue ran in it."""
    blocks, cur = [], None
    for code, clk in events:
        if code == ISSUE:  # wave 0's issue opens a block
            cur = {"start": clk, "events": []}
            blocks.append(cur)
        if cur is not None:
            cur["events"].append((code, clk))
    return blocks


def _first(events, code):
    return next((clk for c, clk in events if c == code), None)


def _union(intervals):
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize_consumer(events: list[tuple[int, int]], waves: int) -> dict:
    blocks = consumer_blocks(events)
    # a block holding EPI_BEGIN starts a tile (its predecessor's epilogue runs under it); the CTA's
    # first block starts the first tile
    starts = [i for i, b in enumerate(blocks) if i == 0 or _first(b["events"], EPI_BEGIN) is not None]
    if len(starts) < 3:
        return {"tiles": len(starts), "note": "fewer than three tiles: nothing steady to summarize"}
    kblocks = starts[1] - starts[0]
    tiles = [(s, s + kblocks) for s in starts[1:] if s + kblocks < len(blocks)]  # whole tiles after the first
    periods = {p: [] for p in range(kblocks)}
    for s, e in tiles:
        for p in range(kblocks):
            periods[p].append(blocks[s + p + 1]["start"] - blocks[s + p]["start"])
    med = [_median(periods[p]) for p in range(kblocks)]
    steady = _median([x for p in range(1, kblocks) for x in periods[p]]) if kblocks > 1 else med[0]
    tile_period = _median([blocks[e]["start"] - blocks[s]["start"] for s, e in tiles])
    epi, epi_parts = [], {"before_first_box": [], "box_free_wait": [], "box_write": []}
    acq = {p: [] for p in range(kblocks)}
    wg = {(p, w): [] for p in range(kblocks) for w in range(waves)}
    promote = []
    for s, e in tiles:
        for p in range(kblocks):
            ev = blocks[s + p]["events"]
            if p == 0:
                b, f = _first(ev, EPI_BEGIN), _first(ev, EPI_END)
                if b is not None and f is not None:
                    epi.append(f - b)
                    inner = [(c, clk) for c, clk in ev if b <= clk <= f and c in (BOX_FREE, BOX_WRITTEN)]
                    prev = b
                    for i, (c, clk) in enumerate(inner):
                        if c == BOX_FREE:
                            epi_parts["before_first_box" if i == 0 else "box_free_wait"].append(clk - prev)
                        else:
                            epi_parts["box_write"].append(clk - prev)
                        prev = clk
            a0, a1 = _first(ev, ACQ_BEGIN), _first(ev, ACQ_END)
            if a0 is not None and a1 is not None:
                acq[(p + 1) % kblocks].append(a1 - a0)  # the next block's stage
            issued, waited = {}, {}
            for c, clk in ev:
                if ISSUED <= c < ISSUED + waves:
                    issued[c - ISSUED] = clk
                elif WAITED <= c < WAITED + waves and c - WAITED in issued:
                    waited[c - WAITED] = clk
                    wg[(p, c - WAITED)].append(clk - issued[c - WAITED])
                elif PROMOTED <= c < PROMOTED + waves and c - PROMOTED in waited:
                    promote.append(clk - waited[c - PROMOTED])
    per_tile_epi_boxes = {k: sum(v) / max(len(tiles), 1) for k, v in epi_parts.items()}
    return {
        "tiles": len(tiles),
        "kblocks": kblocks,
        "tile_period": tile_period,
        "steady_block_period": steady,
        "tile_excess": tile_period - kblocks * steady,
        "block_period_by_place": med,
        "epilogue": _median(epi),
        "epilogue_parts_per_tile": per_tile_epi_boxes,
        "acquire_wait_by_place": [_median(acq[p]) for p in range(kblocks)],
        "wgmma_wait_by_place": {f"{p}.{w}": _median(v) for (p, w), v in wg.items()},
        "promotion": _median(promote),
    }


def tensor_busy(consumers: list[list[tuple[int, int]]], waves: int) -> float:
    """Share of the consumers' common span in which at least one has a wgmma issued and not yet
    waited for (from the end of its issue to the end of its wait)."""
    intervals, lo, hi = [], [], []
    for events in consumers:
        if not events:
            continue
        lo.append(events[0][1])
        hi.append(events[-1][1])
        open_at = {}
        for code, clk in events:
            if ISSUED <= code < ISSUED + waves:
                open_at[code - ISSUED] = clk
            elif WAITED <= code < WAITED + waves and code - WAITED in open_at:
                intervals.append((open_at.pop(code - WAITED), clk))
    if not intervals:
        return float("nan")
    a, b = max(lo), min(hi)
    clipped = [(max(x, a), min(y, b)) for x, y in intervals if y > a and x < b]
    return _union(clipped) / (b - a) if b > a else float("nan")


def summarize(buf, waves: int, consumers: int) -> dict:
    """buf[cta][role][slot] as read back; role 0 the producer, 1 + c consumer c."""
    out = {}
    for cta, roles in enumerate(buf):
        evs = [decode(r) for r in roles]
        cons = evs[1:1 + consumers]
        if not any(cons):
            continue
        out[f"cta{cta}"] = {
            "consumers": [summarize_consumer(e, waves) for e in cons],
            "tensor_busy": tensor_busy(cons, waves),
        }
    return out


def _fmt(x):
    return "-" if x != x else f"{x:.0f}"


def report(name: str, summ: dict) -> str:
    lines = [f"== {name}"]
    for cta, s in summ.items():
        lines.append(f"{cta}: some wgmma in flight {100 * s['tensor_busy']:.1f} % of the span")
        for c, r in enumerate(s["consumers"]):
            if "note" in r:
                lines.append(f"  consumer {c}: {r['note']}")
                continue
            lines.append(
                f"  consumer {c}: {r['tiles']} tiles of {r['kblocks']} K blocks; tile {_fmt(r['tile_period'])} cycles, "
                f"steady block {_fmt(r['steady_block_period'])}, tile excess {_fmt(r['tile_excess'])}; "
                f"epilogue {_fmt(r['epilogue'])} (per tile: "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in r["epilogue_parts_per_tile"].items())
                + f"); promotion {_fmt(r['promotion'])}")
            lines.append("    block period by place: " + " ".join(_fmt(x) for x in r["block_period_by_place"]))
            lines.append("    acquire wait by place: " + " ".join(_fmt(x) for x in r["acquire_wait_by_place"]))
            lines.append("    wgmma wait by place.wave: " + " ".join(
                f"{k}:{_fmt(v)}" for k, v in r["wgmma_wait_by_place"].items()))
    return "\n".join(lines)


def _waves_consumers(cfg: tuple[int, int, int]) -> tuple[int, int]:
    bm = cfg[0]
    consumers = 3 if bm == 192 else 2
    return bm // consumers // 64, consumers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", help="LIB.so@BMxBNxCL of a library built with the trace variant")
    ap.add_argument("--shape", default="8192x8192x2048", help="MxNxK")
    ap.add_argument("--json", help="write the summaries here")
    args = ap.parse_args()
    import numpy as np
    import torch

    import ltx_kernels as lk
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from gemm_protocols import lib_gemm

    m, n, k = (int(v) for v in args.shape.split("x"))
    torch.manual_seed(0)
    qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
    qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
    sb_tma = lk.gemm._tma_weight_scales(sb)
    bias = torch.randn(n, device="cuda")
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = lk.fp8_gemm_nt(qa, sa, qb, sb, bias).float()
    results = {}
    for spec in args.specs:
        path, _, cfg_s = spec.rpartition("@")
        cfg = tuple(int(v) for v in cfg_s.split("x"))
        lib = ctypes.CDLL(path)
        dims = (ctypes.c_int * 3)()
        lib.ltx_sm90_trace_dims(dims)
        call = lib_gemm(path)
        for _ in range(3):  # warm-up
            call(qa, sa, qb, sb_tma, bias, d, cfg)
        torch.cuda.synchronize()
        if lib.ltx_sm90_trace_clear() != 0:
            raise RuntimeError("trace_clear failed")
        call(qa, sa, qb, sb_tma, bias, d, cfg)
        torch.cuda.synchronize()
        buf = np.zeros((dims[0], dims[1], dims[2]), dtype=np.uint64)
        if lib.ltx_sm90_trace_read(ctypes.c_void_p(buf.ctypes.data)) != 0:
            raise RuntimeError("trace_read failed")
        rel = ((d.float() - ref).norm() / ref.norm()).item()
        waves, consumers = _waves_consumers(cfg)
        summ = summarize(buf, waves, consumers)
        name = f"{pathlib.Path(path).stem.removeprefix('libsm90_')}@{cfg_s} {args.shape} (rel. error vs extension {rel:.2e})"
        print(report(name, summ), flush=True)
        results[name] = summ
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
