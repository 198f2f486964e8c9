"""Write a timing variant of the SM90 GEMM kernel: a copy of csrc/gemm_sm90 with the per-128-K
promotion rewritten, so that its cost can be measured in the standalone harness. The production
source stays free of experiment switches; tools/sm90_build_standalone.sh calls this for a
NAME:VARIANT spec.

    python tools/sm90_kernel_variant.py VARIANT SRC_DIR DST_DIR

Variants, joined with "+" to combine (nopromote, fadd and nosb compute wrong results on purpose:
the harness reports "check WRONG" and still times them; LTX_SM90_CHECK=0 skips the check):
  nopromote  no promotion; a never-taken branch keeps the wgmma results live
  fadd       total += acc: an unscaled fp32 add per element, as a tensorwise GEMM promotes
  muladd     the scaling as FMUL then FADD (two 2-operand instructions) instead of one FFMA
  boxes      a whole tile's epilogue boxes per consumer where that leaves 3 stages or more (256x128:
             3 stages and 4 boxes instead of 4 stages and 1 box)
  sbst       B's scales stored into the ring by the producer thread (ld.global one block ahead,
             st.shared, mbarrier arrive) instead of cp.async (racecheck reports it as it does the
             kernel)
  c192       192x128 in 2-CTA clusters (lib:NAME@192x128x2), producer 40 / consumers 152 registers
  rank0a     2-CTA clusters: rank 0 loads the whole A tile and multicasts it (instead of each CTA
             loading half)
  nosb       no B scales in the ring: the full barrier waits for the TMA bytes alone and every block
             uses one B scale read once per CTA (timing only: is the 4-byte copy on the ring's
             critical path?)
  tsb        B's 128x128 scales loaded by TMA (a 16-byte box of 4 K blocks of the tile's one or two
             scale rows per stage, of which the stage uses the first) instead of 4-byte cp.async
             copies: the full barrier counts the expect-tx arrive alone, and racecheck does not see
             the asynchronous proxy's writes. Needs B's scales with a K stride of 1 and 16-byte
             rows (K / 128 a multiple of 4, every LTX-2 shape); the launcher refuses others
  gsb        B's 128x128 scales read by the consumers from global memory (a cursor over the blocks
             they acquire) instead of 4-byte cp.async copies into the ring; the full barrier then
             has one arrival (the producer's expect-tx)
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


STAGES = "  static constexpr int kStages = fit(1);\n"
# The kernel's B-scale path, which several variants rewrite: the full barrier's two arrivals, the
# producer's per-tile scale-row pointers and its per-stage 4-byte copies, the consumers' reads.
FULL_INIT = "      mbar_init(&s.full[i], 2);"
SB_ROWS = "        const int nb0 = min(n_blk * BN / 128, nblocks128 - 1), nb1 = min(nb0 + 1, nblocks128 - 1);\n"
SB_POINTERS = """        const float* sb0 = p.sb + nb0 * p.sb_sn;
        const float* sb1 = p.sb + nb1 * p.sb_sn;
"""
SB_COPIES = """          cp_async_4(&s.sb[stage][0], sb0 + kb * p.sb_sk);
          if constexpr (BN > 128) cp_async_4(&s.sb[stage][1], sb1 + kb * p.sb_sk);
          cp_async_arrive(&s.full[stage]);
"""
SB_READ0 = "      sc.b[0] = lds_ordered(&s.sb[stage][0]);\n"
SB_READ1 = "      sc.b[1] = BN > 128 ? lds_ordered(&s.sb[stage][1]) : 0.f;\n"
ACQUIRE = "    auto acquire = [&](Scales& sc) {\n"

RANK0A = [
    ("        int a_row = m_blk * BM + rank * kRowsA;\n        if (a_row >= p.M) a_row = 0;\n",
     "        const int a_row = m_blk * BM;\n"),
    ("""          if constexpr (CLUSTER > 1)
            tma_load_2d_multicast(&tma_a, &s.full[stage], s.a[stage] + rank * kRowsA * BK, kb * BK, a_row,
                                  static_cast<uint16_t>((1 << CLUSTER) - 1));
""", """          if constexpr (CLUSTER > 1) {
            if (rank == 0)
              tma_load_2d_multicast(&tma_a, &s.full[stage], s.a[stage], kb * BK, a_row,
                                    static_cast<uint16_t>((1 << CLUSTER) - 1));
          }
"""),
    ("a, p.M, p.K, lda, BK, BM / CLUSTER)) return e;", "a, p.M, p.K, lda, BK, BM)) return e;"),
]

# the B-scale copies out of the producer: the full barrier counts its expect-tx arrive alone
NO_SB_COPIES = [(FULL_INIT, "      mbar_init(&s.full[i], 1);"), (SB_COPIES, ""), (SB_POINTERS, ""), (SB_ROWS, "")]

GSB = NO_SB_COPIES + [
    (ACQUIRE, """    // B scales from global memory: a cursor over the blocks in the order they are acquired
    int acq_unit = cluster_id, acq_kb = 0;
    const float* acq_sb0 = p.sb;
    const float* acq_sb1 = p.sb;
    auto acq_tile = [&] {
      int m_blk, n_grp;
      unit_coords(acq_unit / p.splits, num_m, num_groups, m_blk, n_grp);
      const int nb0 = min((n_grp * CLUSTER + rank) * BN / 128, nblocks128 - 1), nb1 = min(nb0 + 1, nblocks128 - 1);
      acq_sb0 = p.sb + nb0 * p.sb_sn;
      acq_sb1 = p.sb + nb1 * p.sb_sn;
    };
    if (acq_unit < num_units) acq_tile();
""" + ACQUIRE),
    (SB_READ0 + SB_READ1, """      const int kbg = acq_unit % p.splits * kblocks + acq_kb;
      sc.b[0] = ldg_ordered(acq_sb0 + kbg * p.sb_sk);
      sc.b[1] = BN > 128 ? ldg_ordered(acq_sb1 + kbg * p.sb_sk) : 0.f;
      if (++acq_kb == kblocks) {
        acq_kb = 0;
        acq_unit += num_clusters;
        if (acq_unit < num_units) acq_tile();
      }
"""),
]


# No B scales in the ring (timing only, wrong results): the producer's 4-byte copies and their
# arrival go, the full barrier counts the expect-tx arrive alone, and the consumers use one scale
# read once per CTA (a register the compiler cannot fold, so the promotion's math is unchanged).
NOSB = NO_SB_COPIES + [
    (ACQUIRE, "    const float sb_fixed = ldg_ordered(p.sb);\n" + ACQUIRE),
    (SB_READ0 + SB_READ1, "      sc.b[0] = sb_fixed;\n      sc.b[1] = BN > 128 ? sb_fixed : 0.f;\n"),
]


# B's scales by TMA: a [N/128, K/128] tensor map over sb with a box of 4 K blocks (16 bytes, the
# TMA's least inner box) and the tile's one or two scale rows, one box per stage into a 128-byte
# aligned slot; the consumers read element 0 (and 4, the second row). Boxes past the matrix's
# edge arrive zero-filled and are counted, as the operand boxes are.
TSB = [
    ("    float sb[kStages][2];   // the stage's 128x128 scales of the tile's first (and second) column block\n",
     "    alignas(128) float sb[kStages][32];  // a TMA box of the tile's one or two scale rows, 4 K blocks each\n"),
    (FULL_INIT, "      mbar_init(&s.full[i], 1);"),
    ("          mbar_expect_tx(&s.full[stage], Cfg::kStageBytes);\n",
     "          mbar_expect_tx(&s.full[stage], Cfg::kStageBytes + (BN > 128 ? 32 : 16));\n"),
    (SB_COPIES, "          tma_load_2d(&tma_sb, &s.full[stage], s.sb[stage], kb, nb0);\n"),
    (SB_POINTERS, ""),
    (SB_ROWS, "        const int nb0 = min(n_blk * BN / 128, nblocks128 - 1);\n"),
    (SB_READ1, "      sc.b[1] = BN > 128 ? lds_ordered(&s.sb[stage][4]) : 0.f;\n"),
    ("const __grid_constant__ CUtensorMap tma_sa, Params p)",
     "const __grid_constant__ CUtensorMap tma_sa,\n                    const __grid_constant__ CUtensorMap tma_sb, Params p)"),
    ("    prefetch_map(&tma_sa);\n", "    prefetch_map(&tma_sa);\n    prefetch_map(&tma_sb);\n"),
    ("  CUtensorMap ma, mb, md, msa;\n", "  CUtensorMap ma, mb, md, msa, msb;\n"),
    ("""                               CU_TENSOR_MAP_SWIZZLE_NONE))
    return e;
""", """                               CU_TENSOR_MAP_SWIZZLE_NONE))
    return e;
  if (p.sb_sk != 1 || (p.sb_sn * 4) % 16 != 0 || reinterpret_cast<uintptr_t>(p.sb) % 16 != 0)
    return "tsb: B's scales need a K stride of 1, 16-byte rows and a 16-byte aligned base";
  if (const char* e = make_map(&msb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sb, p.N / 128, p.K / BK, p.sb_sn * 4, 4,
                               BN > 128 ? 2 : 1, CU_TENSOR_MAP_SWIZZLE_NONE))
    return e;
"""),
    ("<<<grid, threads, smem, stream>>>(ma, mb, md, msa, p);", "<<<grid, threads, smem, stream>>>(ma, mb, md, msa, msb, p);"),
    ("fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, p)", "fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, msb, p)"),
]


# B's scales stored into the ring by the producer thread itself (loaded from global memory one K
# block ahead, st.shared, then a plain mbarrier arrive, which releases the stores) instead of
# 4-byte cp.async copies. Built to see whether racecheck follows that order: it does not (the same
# reports as the kernel's, bench/results/2026-12-04-h200-sm90-2cta-and-128x64). A unit's first
# block is loaded when the unit begins.
SBST = [
    ("""        for (int kb = kb0; kb < kb0 + kblocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
""", """        float sb_next0 = ldg_ordered(sb0 + kb0 * p.sb_sk);
        float sb_next1 = BN > 128 ? ldg_ordered(sb1 + kb0 * p.sb_sk) : 0.f;
        for (int kb = kb0; kb < kb0 + kblocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
"""),
    (SB_COPIES, """          sts_ordered(&s.sb[stage][0], sb_next0);
          if constexpr (BN > 128) sts_ordered(&s.sb[stage][1], sb_next1);
          mbar_arrive(&s.full[stage]);
          if (kb + 1 < kb0 + kblocks) {
            sb_next0 = ldg_ordered(sb0 + (kb + 1) * p.sb_sk);
            if constexpr (BN > 128) sb_next1 = ldg_ordered(sb1 + (kb + 1) * p.sb_sk);
          }
"""),
]


# 192x128 in 2-CTA clusters (A multicast between horizontally adjacent tiles, as 256x128x2): the
# producer keeps 40 registers, the three consumers 152 (128 * 40 + 384 * 152 = 63488). Time it as
# lib:NAME@192x128x2; with rank0a the whole-ring build spills 12 bytes, the stream one none.
C192 = [
    ('  static_assert(BM != 192 || CLUSTER == 1, "BM = 192 runs without clusters");\n', ""),
    ("    setmaxnreg_dec<kConsumers == 3 ? 24 : 40>();\n",
     "    setmaxnreg_dec<kConsumers == 3 ? (CLUSTER > 1 ? 40 : 24) : 40>();\n"),
    ("    setmaxnreg_inc<kConsumers == 3 ? 160 : 232>();\n",
     "    setmaxnreg_inc<kConsumers == 3 ? (CLUSTER > 1 ? 152 : 160) : 232>();\n"),
    ("    case 1921281: return",
     "    case 1921282: return launch_any_k<192, 128, 2>(p, a, lda, b, ldb, num_sms, stream);\n    case 1921281: return"),
]


# variant -> the (old, new) line replacements it makes, each old text found exactly once
REPLACEMENTS = {
    "c192": C192,
    "sbst": SBST,
    "rank0a": RANK0A,
    "gsb": GSB,
    "nosb": NOSB,
    "tsb": TSB,
    "boxes": [(STAGES, "  static constexpr int kStages = fit(kBoxesPerTile) >= 3 ? fit(kBoxesPerTile) : fit(1);\n")],
}


PROMOTION_VARIANTS = ("nopromote", "fadd", "muladd")  # rewrites of the promotion (rewrite below)


def structural(src: str, variant: str) -> str:
    if variant not in REPLACEMENTS:
        return rewrite(src, variant)
    for old, new in REPLACEMENTS[variant]:
        src = replace_once(src, old, new, variant)
    return src


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
        raise SystemExit(f"unknown variant {variant!r} ({', '.join(PROMOTION_VARIANTS + tuple(REPLACEMENTS))})")
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
