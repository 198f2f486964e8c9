"""Summarize an Nsight Compute GEMM profile written by `tools/upstream/side_by_side.sh ncu`: per
kernel the headline metrics (from ncu_gemm.txt; dram_MB: DRAM bytes read and written, the Memory
Workload Analysis throughput times the duration) and, from the per-SASS-line samples
(ncu_gemm_sass.csv.gz), where the warps of the hot loop wait.

    python tools/ncu_gemm_summary.py OUT/ncu_gemm.txt OUT/ncu_gemm_sass.csv.gz

The hot loop is every SASS line executed at least --hot times (default 100000: the per-K-block
lines at LTX-2 sizes). Its samples are split by instruction: WARPGROUP.DEPBAR (a consumer waiting
for its own wgmma: the tensor pipe is busy with it), FFMA / FMUL (the promotion), QGMMA (issue),
the instruction after a BAR.SYNC (a named-barrier wait shows on it; a DEPBAR right after one counts
as DEPBAR), mbarrier waits (the try-wait, and the branch on its predicate, where a warp whose
stage is not ready stalls: a consumer waiting for a stage's data, a producer for a free stage;
ptxas may schedule a few instructions between the two) and the rest; and the hot loop's executed instructions per wave (per warp: executed
instructions over executed first wgmmas of a wave). Samples of warps
outside the hot loop (an idle producer warp parked at the final cluster barrier, say) are left out
of those shares; ``--outside N`` lists the N lines outside it with the most samples, each with its
share of all the kernel's samples (in the cluster build, the producer warpgroup's three idle warps
wait at the final cluster barrier, UCGABAR_WAIT, for the whole kernel: a quarter of its samples,
issuing nothing). ``--groups N`` sums the samples of lines executed equally often (one region of
the code each: a K-loop copy, the epilogue's rounds) with their stall reasons.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re

METRICS = [("duration_us", r"^    Duration\s+us\s+([\d.,]+)"),
           ("sm_ghz", r"^    SM Frequency\s+Ghz\s+([\d.,]+)"),
           ("tensor_active_%", r"SM: Pipe Tensor Cycles Active\s+%\s+([\d.,]+)"),
           ("issue_busy_%", r"Issue Slots Busy\s+%\s+([\d.,]+)"),
           ("instructions", r"^    Executed Instructions\s+inst\s+([\d.,]+)"),
           ("registers", r"Registers Per Thread\s+register/thread\s+([\d.,]+)"),
           ("l2_%", r"L2 Cache Throughput\s+%\s+([\d.,]+)"),
           ("dram_GBps", r"^    Memory Throughput\s+Gbyte/s\s+([\d.,]+)"),
           ("spill_requests", r"Local Memory Spilling Requests\s+([\d.,]+)")]


def headline(txt_path: str) -> list[tuple[str, dict]]:
    text = open(txt_path).read()
    blocks = re.split(r"\n  (?=\S.*\(\d+, \d+, \d+\)x\()", text)[1:]
    out = []
    for b in blocks:
        name = b.split("\n")[0].split(">(")[0].strip() + ">"
        vals = {}
        for key, pat in METRICS:
            m = re.search(pat, b, re.M)
            vals[key] = m.group(1) if m else "-"
        try:  # DRAM bytes read and written during the kernel: Memory Workload Analysis's throughput x duration
            vals["dram_MB"] = round(float(vals["dram_GBps"].replace(",", "")) * float(vals["duration_us"].replace(",", "")) / 1e3)
        except ValueError:
            vals["dram_MB"] = "-"
        out.append((name, vals))
    return out


def sass_kernels(csv_path: str) -> list[tuple[str, list[dict]]]:
    rows = csv.reader(io.TextIOWrapper(gzip.open(csv_path), "utf-8"))
    kernels, header = [], None
    for r in rows:
        if r and r[0] == "Kernel Name":
            kernels.append((r[1], []))
        elif r and r[0] == "Address":
            header = r
        elif kernels and header and len(r) == len(header):
            kernels[-1][1].append(dict(zip(header, r)))
    # The source page can list one profiled kernel twice in a row (seen for the extension's
    # kernels): keep one, so the entries pair in order with the report's kernels.
    return [k for i, k in enumerate(kernels) if i == 0 or k != kernels[i - 1]]


def executed(line: dict) -> int:
    return int(line["Instructions Executed"].replace(",", "") or 0)


def waits_on(src: str, pred: str | None, since: int, window: int = 4) -> bool:
    """Whether a branch retries while the predicate a try-wait wrote at most ``window`` instructions
    before is false (the wait loop's ``@!Pn BRA``)."""
    return pred is not None and since <= window and bool(re.match(rf"@!{pred}\s+BRA", src))


def scan(lines: list[dict]):
    """Each SASS line as (line, source, opcode, wait): ``wait`` is the try-wait line an mbarrier
    wait's line belongs to (the try-wait itself, or the retry branch on its predicate, which ptxas
    may schedule a few instructions later), else None."""
    trywait, pred, since = None, None, 99  # the last try-wait, its predicate, instructions since
    for line in lines:
        src = line["Source"].strip()
        op = src.split()[1] if src.startswith("@") else src.split()[0]
        if op.startswith("SYNCS.PHASECHK"):
            m = re.search(r"PHASECHK\S*\s+(P\d)", src)
            trywait, pred, since = line, (m.group(1) if m else None), 0
            yield line, src, op, line
            continue
        yield line, src, op, trywait if op == "BRA" and waits_on(src, pred, since) else None
        since += 1
        if pred and re.match(rf"(@!?U?P\w+\s+)?\S+\s+{pred},", src):  # written again
            pred = None


def split_hot_loop(lines: list[dict], hot: int) -> dict:
    share = collections.Counter()
    after_bar = False
    hot_executed = wave_starts = 0
    for line, src, op, wait in scan(lines):
        if executed(line) >= hot:
            hot_executed += executed(line)
            if op.startswith("QGMMA") and "!UPT" in src:  # a wave's first wgmma (fresh accumulator)
                wave_starts += executed(line)
            if op.startswith("WARPGROUP.DEPBAR"):
                kind = "DEPBAR (own wgmma)"
            elif op in ("FFMA", "FMUL"):
                kind = "promotion FFMA/FMUL"
            elif op.startswith("QGMMA"):
                kind = "QGMMA issue"
            elif wait is not None:
                kind = "mbarrier wait"
            elif after_bar:
                kind = "after BAR.SYNC"
            else:
                kind = "other"
            share[kind] += samples(line)
        after_bar = op.startswith("BAR.SYNC")
    total = sum(share.values()) or 1
    per_wave = round(hot_executed / wave_starts, 1) if wave_starts else None
    all_samples = sum(samples(line) for line in lines) or 1
    return ({k: round(100.0 * v / total, 1) for k, v in share.most_common()}
            | {"hot_loop_samples": total, "of_all_%": round(100.0 * total / all_samples, 1),
               "instructions_per_wave": per_wave})


def samples(line: dict) -> int:
    return int(line["Warp Stall Sampling (All Samples)"] or 0)


def outside_hot_loop(lines: list[dict], hot: int, n: int) -> list[str]:
    """The n lines outside the hot loop with the most samples: share of all samples, executions, SASS."""
    total = sum(samples(line) for line in lines) or 1
    cold = sorted((line for line in lines if executed(line) < hot), key=samples, reverse=True)[:n]
    return [f"{100.0 * samples(line) / total:5.1f} %  executed {executed(line):>9,}  {line['Source'].strip()[:90]}"
            for line in cold]


def barrier_waits(lines: list[dict]) -> list[int]:
    """Executions of each mbarrier try-wait site (SYNCS.PHASECHK), in code order. A wait that
    finds its phase incomplete runs the try-wait again at a retry site, so in code laid out as
    first tries, then retries (nvcc puts the retry loops at the end of the function), the retry
    sites' executions over the first tries' show how often a consumer found its stage's data
    missing (or a producer its stage still in use)."""
    return [executed(line) for line in lines if "SYNCS.PHASECHK" in line["Source"]]


def wait_sites(lines: list[dict], hot: int) -> list[str]:
    """Each try-wait site of the hot loop: its barrier operand, executions, and the samples of the
    wait (the try-wait and its retry branch) as a share of the hot loop's samples."""
    total = sum(samples(line) for line in lines if executed(line) >= hot) or 1
    sites = {}  # id of the try-wait line -> [barrier operand, executions, samples], in code order
    for line, src, op, wait in scan(lines):
        if wait is line and executed(line) >= hot:
            m = re.search(r"PHASECHK\S*\s+P\d,\s*(\[[^\]]*\])", src)
            sites[id(line)] = [m.group(1) if m else "?", executed(line), samples(line)]
        elif wait is not None and id(wait) in sites and executed(line) >= hot:
            sites[id(wait)][2] += samples(line)
    return [f"{where} executed {n:,}: {100.0 * k / total:.1f} %" for where, n, k in sites.values()]


def execution_groups(lines: list[dict], n: int) -> list[str]:
    """Samples grouped by how often their lines executed, the n largest groups: lines executed
    equally often are one region of the kernel (a copy of the unrolled K loop, the epilogue's
    rounds, the producer's loop), so this splits the kernel's time by region without addresses.
    Each group: its share of all samples, its lines, and the stall reasons of its samples."""
    total = sum(samples(line) for line in lines) or 1
    reasons = [k for k in (lines[0] if lines else {}) if k.startswith("stall_") and "Not Issued" not in k]
    groups = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for line in lines:
        g = groups[executed(line)]
        g[0] += samples(line)
        g[1] += 1
        for k in reasons:
            g[2][k[len("stall_"):]] += int(line[k] or 0)
    rows = []
    for ex, (k, nlines, why) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:n]:
        top = " ".join(f"{r} {100.0 * v / (k or 1):.0f}" for r, v in why.most_common(5) if v)
        rows.append(f"{100.0 * k / total:5.1f} %  executed {ex:>9,} x {nlines:4d} lines  stalls, %: {top}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("txt")
    ap.add_argument("sass_csv_gz", nargs="?")
    ap.add_argument("--hot", type=int, default=100000)
    ap.add_argument("--waits", action="store_true",
                    help="also list the executions of every mbarrier try-wait site, and the hot loop's waits by site")
    ap.add_argument("--outside", type=int, default=0, metavar="N",
                    help="also list the N lines outside the hot loop with the most samples")
    ap.add_argument("--groups", type=int, default=0, metavar="N",
                    help="also list the N largest groups of lines executed equally often, with their stall reasons")
    args = ap.parse_args()
    heads = headline(args.txt)
    sass = sass_kernels(args.sass_csv_gz) if args.sass_csv_gz else []
    for i, (name, vals) in enumerate(heads):
        print(name)
        print("  " + "  ".join(f"{k}={v}" for k, v in vals.items()))
        if i < len(sass):
            print("  hot loop samples, %: " + "  ".join(f"{k}={v}" for k, v in split_hot_loop(sass[i][1], args.hot).items()))
            if args.waits:
                print("  try-wait executions per site: " + " ".join(str(n) for n in barrier_waits(sass[i][1]) if n))
                for site in wait_sites(sass[i][1], args.hot):
                    print("  hot-loop wait at " + site)
            for row in outside_hot_loop(sass[i][1], args.hot, args.outside):
                print("  outside the hot loop: " + row)
            for row in execution_groups(sass[i][1], args.groups):
                print("  executed alike: " + row)


if __name__ == "__main__":
    main()
