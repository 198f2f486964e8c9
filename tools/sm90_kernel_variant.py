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
  dual       128x128: two accumulators a consumer, the next K block issued before the current one
             is waited for and promoted
  tiles      two-wave tiles run tile by tile (revolutions of unrolled blocks): no K-block counter,
             no end-of-stream test per block; needs K / 128 a multiple of the ring depth
  tilesall   (with tiles: "tiles+tilesall") the one-wave configs tile by tile too
  boxes      a whole tile's epilogue boxes per consumer where that leaves 3 stages or more (256x128:
             3 stages and 4 boxes instead of 4 stages and 1 box)
  rank0a     2-CTA clusters: rank 0 loads the whole A tile and multicasts it (instead of each CTA
             loading half)
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


# Two-wave tiles run tile by tile: per tile, revolutions of kStages unrolled blocks, so a tile's
# first block is always stage 0 and no block counts K blocks or tests the end of the stream; the
# only run-time tests are in the first copy (a tile that follows another: its epilogue) and the
# last (is there a next block to acquire ahead). Needs K / 128 (per K slice) a multiple of
# kStages (every LTX-2 shape); other K give wrong results (timing only). Keeping the unrolled
# stream beside it for the other K made ptxas spill (a 392-byte stack frame).
TILES = [("    if constexpr (kWaves == 2) {\n",
          "    auto block = [&](bool more, bool tile_start) {  // one K block: acquire ahead if more follow\n"
          "      sc = sc_next;\n"
          "#pragma unroll\n"
          "      for (int w = 0; w < kWaves; ++w) {\n"
          "        issue(acc, w);\n"
          "        if (w == kWaves - 1 && more) acquire(sc_next);\n"
          "        if (w == 0 && tile_start) {\n"
          "          epilogue();\n"
          "          unit += num_clusters;\n"
          "          begin_tile();\n"
          "        }\n"
          "        wgmma_wait<0>();\n"
          "        fence_operands(acc);\n"
          "        if (w == kWaves - 1) release();\n"
          "        promote(w, acc, sc);\n"
          "      }\n"
          "    };\n"
          "    if constexpr (kWaves == 2) {\n"
          "      const int revs = kblocks / kStages;\n"
          "      for (int u = 0; u < my_units; ++u)\n"
          "        for (int r = 0; r < revs; ++r)\n"
          "#pragma unroll\n"
          "          for (int i = 0; i < kStages; ++i) {\n"
          "            stage = release_stage = i;\n"
          "            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, i == 0 && r == 0 && u > 0);\n"
          "          }\n"
          "      if (my_units > 0) epilogue();\n"
          "    } else if constexpr (false) {\n")]
LOOP_HEAD = "    if (stream > 0) acquire(sc_next);\n"
LOOP_TAIL = "    if (epilogue_due) epilogue();\n"
# 128x128 with two accumulators a consumer: block g+1 is issued before block g is waited for
# (wgmma.wait_group 1) and promoted. The loop is unrolled by two so each accumulator keeps its
# registers (a loop-carried accumulator in flight makes ptxas serialize the wgmma).
DUAL = """    if constexpr (BM == 128 && BN == 128) {
      float acc1[BN / 2];
      int kb_d = 0;
      auto step = [&](float (&cur)[BN / 2], Scales& sc_cur, float (&nxt)[BN / 2], Scales& sc_nxt, bool more) {
        if (more) {
          acquire(sc_nxt);
          issue(nxt, 0);
          wgmma_wait<1>();
        } else {
          wgmma_wait<0>();
        }
        fence_operands(cur);
        release();
        promote(0, cur, sc_cur);
        if (++kb_d == kblocks) {
          kb_d = 0;
          epilogue();
          if (more) {
            unit += num_clusters;
            begin_tile();
          }
        }
      };
      if (stream > 0) {
        acquire(sc);
        issue(acc, 0);
        int g = 0;
        for (; g + 2 < stream; g += 2) {
          step(acc, sc, acc1, sc_next, true);
          step(acc1, sc_next, acc, sc, true);
        }
        if (g + 1 < stream) {
          step(acc, sc, acc1, sc_next, true);
          step(acc1, sc_next, acc, sc, false);
        } else {
          step(acc, sc, acc1, sc_next, false);
        }
      }
    } else {
"""
STAGES = "  static constexpr int kStages = fit(1);\n"

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

GSB = [
    ("      mbar_init(&s.full[i], 2);", "      mbar_init(&s.full[i], 1);"),
    ("""          cp_async_4(&s.sb[stage][0], sb0 + kb * p.sb_sk);
          if constexpr (BN > 128) cp_async_4(&s.sb[stage][1], sb1 + kb * p.sb_sk);
          cp_async_arrive(&s.full[stage]);
""", ""),
    ("""        const float* sb0 = p.sb + nb0 * p.sb_sn;
        const float* sb1 = p.sb + nb1 * p.sb_sn;
""", ""),
    ("        const int nb0 = min(n_blk * BN / 128, nblocks128 - 1), nb1 = min(nb0 + 1, nblocks128 - 1);\n", ""),
    ("""    auto acquire = [&](Scales& sc) {
""", """    // B scales from global memory: a cursor over the blocks in the order they are acquired
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
    auto acquire = [&](Scales& sc) {
"""),
    ("""      sc.b[0] = lds_ordered(&s.sb[stage][0]);
      sc.b[1] = BN > 128 ? lds_ordered(&s.sb[stage][1]) : 0.f;
""", """      const int kbg = acq_unit % p.splits * kblocks + acq_kb;
      sc.b[0] = ldg_ordered(acq_sb0 + kbg * p.sb_sk);
      sc.b[1] = BN > 128 ? ldg_ordered(acq_sb1 + kbg * p.sb_sk) : 0.f;
      if (++acq_kb == kblocks) {
        acq_kb = 0;
        acq_unit += num_clusters;
        if (acq_unit < num_units) acq_tile();
      }
"""),
]


# variant -> the (old, new) line replacements it makes, each old text found exactly once
REPLACEMENTS = {
    "tiles": TILES,
    # (after tiles) every config tile by tile, the one-wave ones too
    "tilesall": [("    if constexpr (kWaves == 2) {\n      const int revs", "    if constexpr (true) {\n      const int revs")],
    "dual": [(LOOP_HEAD, DUAL + LOOP_HEAD), (LOOP_TAIL, LOOP_TAIL + "    }\n")],
    "rank0a": RANK0A,
    "gsb": GSB,
    "boxes": [(STAGES, "  static constexpr int kStages = fit(kBoxesPerTile) >= 3 ? fit(kBoxesPerTile) : fit(1);\n")],
}


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
        raise SystemExit(f"unknown variant {variant!r} (nopromote, fadd, muladd, dual, tiles, tilesall, boxes, rank0a, gsb)")
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
