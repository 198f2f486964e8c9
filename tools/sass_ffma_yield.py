"""Experiment: let the warp scheduler switch warps inside the promotion's FFMA runs (sm_90 SASS).

ptxas marks every other FFMA of a long run with an operand-reuse flag, and a reused operand forbids
the scheduler from switching warps after that instruction (the control word's yield bit is set
with it). DeepGEMM reports 10 %+ from clearing both in part of such runs, so that another
warpgroup's instructions (its wgmma issue) interleave with the FFMAs. This rewrites those bits in
a binary in place (an executable or .so whose device code is not compressed):

    python tools/sass_ffma_yield.py BINARY [--fraction 0.5] [--min-run 16]

Per run of at least --min-run consecutive FFMAs, the first --fraction of them lose their reuse
flags and get bit 45 = --yield-bit. Prints what it changed. Timing experiments only (tools/sm90_variants.sh).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

REUSE_BITS = 0xF << 58  # operand-reuse flags of the control word (high 64 bits)
YIELD_BIT = 1 << 45
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]{16}) \*/")
_HIGH = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")


def sass_instructions(binary: str, cuobjdump: str) -> list[list[tuple[str, int, int]]]:
    """Per function: (text, low word, high word) of each instruction."""
    out = subprocess.run([cuobjdump, "-sass", binary], capture_output=True, text=True, check=True).stdout
    functions, current, pending = [], None, None
    for line in out.splitlines():
        if "Function :" in line:
            current = []
            functions.append(current)
            continue
        m = _LINE.search(line)
        if m and current is not None:
            pending = (m.group(2).strip(), int(m.group(3), 16))
            continue
        h = _HIGH.match(line)
        if h and pending is not None:
            current.append((pending[0], pending[1], int(h.group(1), 16)))
            pending = None
    return functions


def ffma_runs(instrs, min_run: int):
    run = []
    for ins in instrs + [("END", 0, 0)]:
        if ins[0].startswith("FFMA"):
            run.append(ins)
            continue
        if len(run) >= min_run:
            yield run
        run = []


def encode(run) -> bytes:
    return b"".join(lo.to_bytes(8, "little") + hi.to_bytes(8, "little") for _, lo, hi in run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--min-run", type=int, default=16)
    ap.add_argument("--yield-bit", type=int, choices=(0, 1), default=0,
                    help="value written to bit 45 of the changed FFMAs (0: as DeepGEMM's change does here)")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    args = ap.parse_args()
    data = bytearray(open(args.binary, "rb").read())
    runs = changed = 0
    for instrs in sass_instructions(args.binary, args.cuobjdump):
        for run in ffma_runs(instrs, args.min_run):
            head = int(len(run) * args.fraction)
            bit = YIELD_BIT if args.yield_bit else 0
            new = [(t, lo, (hi & ~(REUSE_BITS | YIELD_BIT)) | bit if i < head else hi) for i, (t, lo, hi) in enumerate(run)]
            old_bytes, new_bytes = encode(run), encode(new)
            if old_bytes == new_bytes:
                continue
            at = data.find(old_bytes)
            if at < 0:
                print(f"run of {len(run)} FFMAs not found in the file (compressed device code?)", file=sys.stderr)
                return 1
            while at >= 0:
                data[at:at + len(old_bytes)] = new_bytes
                at = data.find(old_bytes, at + len(old_bytes))
            runs += 1
            changed += sum(a != b for a, b in zip(run, new))
    open(args.binary, "wb").write(bytes(data))
    print(f"{args.binary}: {changed} FFMAs changed in {runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
