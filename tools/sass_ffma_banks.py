"""Count register-bank conflicts of the FFMAs in each kernel of a binary (sm_90 SASS).

The register file has two banks (even and odd register numbers). An FFMA whose three source
registers are all read from the file (none served by the operand-reuse cache of the previous
instruction) and all have the same parity needs an extra read cycle. In the GEMM's promotion
(``total = fma(scale, acc, total)``) that stretches the phase between a wave's wgmma wait and the
next issue. ptxas avoids the pattern when the register allocation leaves it free to (DeepGEMM's
1D2D kernel: 0 of 1024); a constraint such as a 64-bit store of two totals forces total[2i] and
total[2i+1] into an aligned pair and can bring it back.

    python tools/sass_ffma_banks.py BINARY_OR_SASS [--cuobjdump PATH]

Prints per kernel: FFMAs, and how many read three same-bank registers from the file.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

_FUNC = re.compile(r"Function : (\S+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?);")
_FFMA = re.compile(r"^(?:@!?U?P\w+\s+)?FFMA(?:\.\S+)?\s+R\d+,\s*(\S+),\s*(\S+),\s*(\S+)$")
_REG = re.compile(r"^-?\|?R(\d+)(\.reuse)?\|?$")


def _sources(insn: str):
    """The three source operands of an FFMA as (register number or None, reuse flag)."""
    m = _FFMA.match(insn)
    if not m:
        return None
    out = []
    for op in m.groups():
        r = _REG.match(op)
        out.append((int(r.group(1)), bool(r.group(2))) if r and r.group(1) != "255" else (None, False))
    return out


def count(sass: str) -> dict[str, tuple[int, int]]:
    """kernel name -> (FFMAs, FFMAs reading three same-parity registers from the register file)."""
    result: dict[str, list[int]] = {}
    name, cached = None, {}
    for line in sass.splitlines():
        f = _FUNC.search(line)
        if f:
            name, cached = f.group(1), {}
            result[name] = [0, 0]
            continue
        m = _INSN.search(line)
        if not m or name is None:
            continue
        insn = m.group(1).strip()
        srcs = _sources(insn)
        if srcs is None:
            if not insn.startswith("NOP"):
                cached = {}  # the reuse cache holds operands of the previous instruction only
            continue
        reads = [reg for slot, (reg, _) in enumerate(srcs) if reg is not None and cached.get(slot) != reg]
        result[name][0] += 1
        if len(reads) == 3 and len({r % 2 for r in reads}) == 1:
            result[name][1] += 1
        cached = {slot: reg for slot, (reg, reuse) in enumerate(srcs) if reuse}
    return {k: (v[0], v[1]) for k, v in result.items() if v[0]}


def read_sass(binary: str, cuobjdump: str | None = None) -> str:
    """cuobjdump -sass of an executable, .so or .cubin, or the text of a saved dump (.sass)."""
    if binary.endswith(".sass"):
        return open(binary).read()
    tool = cuobjdump or shutil.which("cuobjdump") or "cuobjdump"
    return subprocess.run([tool, "-sass", binary], capture_output=True, text=True, check=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="an executable, .so or .cubin, or a file of cuobjdump -sass output (.sass)")
    ap.add_argument("--cuobjdump")
    args = ap.parse_args()
    for name, (ffma, conflicts) in count(read_sass(args.binary, args.cuobjdump)).items():
        print(f"{conflicts:5d} of {ffma:5d} FFMAs read three same-bank registers  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
