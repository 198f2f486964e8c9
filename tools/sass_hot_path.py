"""Length of the SM90 GEMM consumers' hot path in the SASS: from the first wgmma of a wave (a
QGMMA with a fresh accumulator) to the next one, counted statically. Branches: a forward
conditional branch is taken when the code it jumps over holds the epilogue (TMA store, global
store, named barrier) - the path of a K block that ends no tile; a backward conditional branch is
taken when it is a loop's back edge and not taken when it retries a barrier wait; unconditional
branches are taken. Prints the instruction count and its mix (FFMA, QGMMA, other) per wave.

    python tools/sass_hot_path.py LIB_OR_BINARY_OR_SASS 192x128x1 [--waves 4] [--cuobjdump PATH]

(The listing comes from tools/sass_ffma_banks.read_sass: cuobjdump, or a saved .sass dump.)
"""
from __future__ import annotations

import argparse
import collections
import re

from sass_ffma_banks import _FUNC, read_sass

_ADDR_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")

EPILOGUE = ("UTMASTG", "STG.E", "BAR.SYNC")
WAIT_RETRY = ("YIELD", "TRYWAIT", "NANOSLEEP")


def functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    """kernel name -> [(address, instruction)] of a cuobjdump -sass listing."""
    out: dict[str, list[tuple[int, str]]] = {}
    code = None
    for line in sass.splitlines():
        f = _FUNC.search(line)
        if f:
            code = out.setdefault(f.group(1), [])
            continue
        m = _ADDR_INSN.search(line)
        if m and code is not None:
            code.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def walk(code: list[tuple[int, str]], start: int, limit: int = 3000) -> list[str]:
    ops = [op for _, op in code]
    index = {a: i for i, (a, _) in enumerate(code)}
    i, path = start + 1, [ops[start]]
    while len(path) < limit:
        op = ops[i]
        path.append(op)
        if "QGMMA" in op and "!UPT" in op:
            return path[:-1]
        m = re.match(r"(@!?U?P\w+\s+)?BRA(?:\.U)?\s+(?:`\()?0x([0-9a-f]+)", op)
        if m and int(m.group(2), 16) in index:
            tgt = index[int(m.group(2), 16)]
            if m.group(1) is None:
                i = tgt
                continue
            if i < tgt < i + 900 and not any(k in ops[tgt] for k in WAIT_RETRY) \
                    and any(k in " ".join(ops[i + 1:tgt]) for k in EPILOGUE):
                i = tgt
                continue
            if tgt < i and not any(k in " ".join(ops[tgt:tgt + 3]) for k in WAIT_RETRY):
                i = tgt
                continue
        i += 1
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("config", help="BMxBNxCLUSTER, e.g. 192x128x1")
    ap.add_argument("--waves", type=int, default=4, help="how many wave starts to walk from")
    ap.add_argument("--cuobjdump")
    args = ap.parse_args()
    bm, bn, cl = args.config.split("x")
    tag = f"fp8_gemm_kernelILi{bm}ELi{bn}ELi{cl}E"
    for name, code in functions(read_sass(args.binary, args.cuobjdump)).items():
        if tag not in name:
            continue
        starts = [i for i, (_, op) in enumerate(code) if "QGMMA" in op and "!UPT" in op]
        for w, s in enumerate(starts[:args.waves]):
            path = walk(code, s)
            mix = collections.Counter("FFMA" if "FFMA" in o else "QGMMA" if "QGMMA" in o else "other" for o in path)
            print(f"{args.config} wave start {w}: {len(path)} instructions to the next ({dict(mix)})")


if __name__ == "__main__":
    main()
