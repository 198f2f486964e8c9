"""Write a timing variant of the SM90 GEMM kernel: a copy of csrc/gemm_sm90 with the per-128-K
promotion rewritten, so that its cost can be measured in the standalone harness. The production
source stays free of experiment switches; tools/sm90_build_standalone.sh calls this for a
NAME:VARIANT spec.

    python tools/sm90_kernel_variant.py VARIANT SRC_DIR DST_DIR

Variants, joined with "+" to combine (the first two compute wrong results on purpose: the
harness reports "check WRONG" and still times them; LTX_SM90_CHECK=0 skips the check):
  nopromote  no promotion; a never-taken branch keeps the wgmma results live
  fadd       total += acc: an unscaled fp32 add per element, as a tensorwise GEMM promotes
  muladd     the scaling as FMUL then FADD (two 2-operand instructions) instead of one FFMA
  noorder    the consumers issue their wgmma without turn order (no named barriers between them)
  boxes      a whole tile's epilogue boxes per consumer where that leaves 3 stages or more (256x128:
             3 stages and 4 boxes instead of 4 stages and 1 box)
"""
from __future__ import annotations

import pathlib
import re
import shutil
import sys

KERNEL = "fp8_gemm_sm90_kernel.cu"
HEAD = "auto promote = [&](int w, const float (&acc)[BN / 2], const Scales& sc) {"
FMA = re.compile(r"(total\[w\]\[[^\]]+\]) = fmaf\((s[01]), (acc\[[^\]]+\]), \1\);")


def replace_once(src: str, old: str, new: str, variant: str) -> str:
    if src.count(old) != 1:
        raise SystemExit(f"{variant}: the kernel no longer has exactly one of:\n{old}")
    return src.replace(old, new)


ORDER_BEFORE = """        if constexpr (kConsumers == 2) {
          if (c == 1) named_barrier_sync(kOrderBarrier, 256);
        } else {
          named_barrier_sync(kOrderBarrier + c, 256);
        }
        issue(acc, w);
        if constexpr (kConsumers == 2) {
          if (c == 0) named_barrier_sync(kOrderBarrier, 256);
        } else if (c < kConsumers - 1 || g + 1 < stream || w + 1 < kWaves) {
          named_barrier_arrive(kOrderBarrier + (c + 1) % kConsumers, 256);
        }
"""
ORDER_FIRST = "    if (kConsumers == 3 && c == kConsumers - 1 && stream > 0) named_barrier_arrive(kOrderBarrier, 256);\n"
STAGES = "  static constexpr int kStages = fit(1);\n"


def structural(src: str, variant: str) -> str:
    if variant == "noorder":
        src = replace_once(src, ORDER_BEFORE, "        issue(acc, w);\n", variant)
        return replace_once(src, ORDER_FIRST, "", variant)
    if variant == "boxes":
        return replace_once(src, STAGES, "  static constexpr int kStages = fit(kBoxesPerTile) >= 3 ? fit(kBoxesPerTile) : fit(1);\n",
                            variant)
    return rewrite(src, variant)


def rewrite(src: str, variant: str) -> str:
    start = src.index(HEAD)
    body_start = src.index("\n", src.index("const float sb1", start)) + 1
    end = src.index("\n    };\n", start) + 1
    body = src[body_start:end]
    if len(FMA.findall(body)) != 4:
        raise SystemExit(f"the promotion no longer has the four fmaf lines this tool rewrites:\n{body}")
    if variant == "nopromote":
        body = ("      if (sc.b[0] == 12345.f)\n"
                "        for (int i = 0; i < BN / 2; ++i) total[w][i] += acc[i] * sb1;\n")
    elif variant == "fadd":
        body = ("#pragma unroll\n"
                "      for (int i = 0; i < BN / 2; ++i) total[w][i] += acc[i];\n")
    elif variant == "muladd":
        body = FMA.sub(r"\1 = __fadd_rn(\1, __fmul_rn(\2, \3));", body)
    else:
        raise SystemExit(f"unknown variant {variant!r} (nopromote, fadd, muladd, noorder, boxes)")
    return src[:body_start] + body + src[end:]


def main(variant: str, src_dir: str, dst_dir: str) -> None:
    src, dst = pathlib.Path(src_dir), pathlib.Path(dst_dir)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, dst / f.name)
    text = (src / KERNEL).read_text()
    for v in variant.split("+"):
        text = structural(text, v)
    (dst / KERNEL).write_text(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
