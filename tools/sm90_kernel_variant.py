"""Write a timing variant of the SM90 GEMM kernel: a copy of csrc/gemm_sm90 rewritten for one
experiment (the per-128-K promotion, the ring, the waits, the tile order), so that it can be
measured in the standalone harness or as a library beside the extension. The production
source stays free of experiment switches; tools/sm90_build_standalone.sh calls this for a
NAME:VARIANT spec.

    python tools/sm90_kernel_variant.py VARIANT SRC_DIR DST_DIR

Variants, joined with "+" to combine (nopromote and fadd compute wrong results on purpose:
the harness reports "check WRONG" and still times them; LTX_SM90_CHECK=0 skips the check):
  nopromote  no promotion; a never-taken branch keeps the wgmma results live
  fadd       total += acc: an unscaled fp32 add per element, as a tensorwise GEMM promotes
  muladd     the scaling as FMUL then FADD (two 2-operand instructions) instead of one FFMA
  boxes      a whole tile's epilogue boxes per consumer where that leaves 3 stages or more (256x128:
             3 stages and 4 boxes instead of 4 stages and 1 box)
  c192       192x128 in 2-CTA clusters (lib:NAME@192x128x2), producer 40 / consumers 152 registers
  rank0a     2-CTA clusters: rank 0 loads the whole A tile and multicasts it (instead of each CTA
             loading half)
  hint       mbarrier waits with a suspend-time hint (the waiting warp sleeps until the phase
             completes or the hint runs out, instead of spinning on try_wait)
  relfirst   two-wave tiles: a block's stage is released before the next block's stage is
             acquired (after the last wave's wgmma wait), so a release never waits for data; in
             clusters a late stage in one CTA then cannot hold the release both producers wait for
  peek       two-wave tiles: the next stage is still acquired under the last wave's wgmma, but only
             if its full barrier has already completed (mbarrier.test_wait); otherwise after the
             release, as relfirst
  ngroup     tile order: groups of 16 column groups (CLUSTER column blocks each) walk the row blocks
             together, a B panel staying in L2 while A streams (deep_gemm's order when it
             multicasts A, 16 column blocks a group at one CTA), instead of groups of 8 row blocks
             walking the columns; ngroup8 / ngroup32: 8 / 32 column groups (8: deep_gemm's 16
             blocks at 2-CTA)
  gm16       tile order: groups of 16 row blocks instead of 8
  txlast     the producer arrives on a stage's full barrier with its byte count after issuing the
             stage's TMA loads instead of before (deep_gemm's order: the loads leave sooner)
  epiwait    one-wave tiles (192x128), whole-ring loop: at a tile's first block the consumer waits
             for its wgmma and releases stage 0 before the previous tile's epilogue, instead of
             running the epilogue under that wgmma and releasing after it (stage 0 refilled sooner;
             the epilogue no longer hidden under the consumer's own wgmma)
  onebar     epilogues staged box by box in two or more buffers: one barrier a box instead of two;
             the thread storing waits, before a box's barrier, for the store that last read the
             next box's buffer, so that barrier also frees it
  sbuf3      256x128: three half boxes of staging a consumer instead of two (the 8 KB the fourth
             stage leaves), taken in turn across tiles, so a box waits for the store three back
  stsm       the epilogue's staging writes as stmatrix.x4 (two 16-byte chunks of both row halves a
             lane: four 8x8 bf16 matrices an instruction) instead of one 4-byte st.shared a pair
  nostorewait  timing only, may write wrong results: no wait for the TMA to have read a staging
             box before it is rewritten (what the epilogue's store waits cost at most)
  samc       2-CTA clusters: rank 0 loads the stage's A scales and multicasts them (both CTAs' tiles
             share the rows), instead of each CTA loading the same 1 KB
  splitepi   two-wave tiles (256x128), whole-ring loop: wave w's part of the previous tile's
             epilogue runs under the next tile's wave-w wgmma, instead of the whole epilogue under
             wave 0's (twice the tensor work to hide it under; the whole-ring tiles have BN = 128,
             so the next tile's promotion needs nothing begin_tile sets before its last wave); the
             next stage is acquired after that part, so its scales are not live during it
  epiafter   a tile's epilogue right after its last block's promotion (whole-ring and stream loops),
             instead of under the next tile's first wave: no stage is held through the epilogue,
             the tensor cores idle during it (deep_gemm's order)
  noepi      timing only, wrong results: the epilogue only zeroes the totals (no bias, no stores):
             what the epilogue costs at most
  nostore    timing only, wrong results: the epilogue stages the tile but issues no TMA store (no
             output traffic, no store reading the staging boxes)
  noop       timing only, no results: every CTA returns at its first instruction (the launch alone:
             its grid, threads, shared memory and parameters, what a profile's elapsed cycles keep
             when the CTAs do nothing)
  stamps     every CTA records its SM, its start and its end (the global timer in ns and the SM's
             cycle counter: its first thread at entry, the last warp to leave by an atomic max) in
             g_cta_stamps; the standalone harness built with -DLTX_SM90_STAMPS prints how the CTAs'
             starts and ends spread across the SMs (build: NAME:stamps=-DLTX_SM90_STAMPS); 128x128x1
             and the whole-ring 256x128 builds keep no stack with it, the others 8-56 bytes
  nobar      timing only, may write wrong results: the epilogue's per-box named barriers and proxy
             fence are left out (each box written and stored without waiting for the consumer's
             other warps)
  stagger / stagger2  consumer c starts c x 1024 / 2048 cycles after consumer 0, so their epilogues
             (which otherwise coincide: every consumer finishes the same tile at once) start apart
             and one consumer's wgmma run while another stores
  pdl        every launch a programmatic dependent of the stream's previous kernel: a CTA signals
             its own dependents at its start, sets up, then waits (griddepcontrol.wait) for that
             kernel before any global access, so back-to-back kernels overlap their set-up with
             the previous one's tail (the change as a library beside the kernel, for graph_ab.py)
  early      one-CTA tiles without pair-K: the thread that initialises the barriers also issues the
             first unit's first ring of stages right away, before the CTA barrier and the
             producer's register hand-off (the producer then skips those blocks): the first stage
             lands sooner, which one-wave grids wait for (512 rows: 6 % of the consumers' samples)
  warpbox    each warp stages its own 16 rows of a box and its lane 0 stores them (16-row TMA boxes)
             after waiting for its own earlier stores: one named barrier of the consumer's warps a
             tile (the bias) instead of two a box
  stgpk      the epilogue without staging: the packed bf16 pairs transposed across each quad with
             shuffles, every lane storing 16 bytes to global memory (no TMA store, no store waits,
             one barrier a tile for the bias)
  lent       whole-ring 256x128: the tile's last K block's stage (always the ring's last) stages
             the epilogue, its release held back until the stores have read it (given back under
             the next tile's second block): the consumer's A rows and half the B tile of that stage
             with its two staging halves hold its whole part, written in one round (one fence and
             one barrier a tile, no store waits between boxes; the B half after every consumer is
             done with it, an mbarrier), where the kernel writes box by box through two halves
  twowaves   whole-ring two-wave tiles (256x128): a tile's first block queues both waves' wgmma under
             the previous tile's epilogue, not wave 0's alone: the epilogue is split into a head
             (bias and bf16 packing of the totals, which frees half their registers) and a tail
             (staging and stores), wave 1 issued into its own accumulator between them, and the
             block's promotions start the totals afresh (total = s * acc); no spills
  cvtint     the epilogue's fp32 -> bf16 rounding (round to nearest even) done with integer
             operations instead of the conversion instruction (F2FP); timing only: finite values are
             rounded right, a NaN may come out as another value

lean (the bias starting a tile's first promotion, stmatrix writes) was written for the epilogue
before it packed the whole part into bf16 pairs first; the last tree with it is 3f9aa33. onebar and
oneround are how the kernel's epilogue works now; they, and perwarp, stgq, stgpk and dualhead,
which were written for the epilogue before it, are in the tree of 78a46ad.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import sys

KERNEL = "fp8_gemm_sm90_kernel.cu"
HEAD = "auto promote = [&](int w, const float (&acc)[BN / 2], const Scales& sc"
# a promotion line: total = fmaf(s, acc, total), optionally behind "first ? s * acc : " (a tile's
# first block starting the total afresh), which a rewrite keeps
FMA = re.compile(r"(total\[w\]\[[^\]]+\]) = ((?:first \? s[01] \* acc\[[^\]]+\] : )?)fmaf\((s[01]), (acc\[[^\]]+\]), \1\);")


def promotion_span(src: str) -> tuple[int, int]:
    """Where the promote lambda starts and where its body ends (the line closing it)."""
    start = src.index(HEAD)
    return start, src.index("\n    };\n", start) + 1


def replace_once(src: str, old: str, new: str, variant: str) -> str:
    if src.count(old) != 1:
        raise SystemExit(f"{variant}: the kernel no longer has exactly one of:\n{old}")
    return src.replace(old, new)


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


HINT = [
    ('      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"',
     '      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\\n"'),
    ('bra LTX_WAIT_%=;\\n"\n      "}\\n" ::"r"(smem_addr(bar)),\n      "r"(parity)\n',
     'bra LTX_WAIT_%=;\\n"\n      "}\\n" ::"r"(smem_addr(bar)),\n      "r"(parity), "r"(0x989680u)\n'),
]
_WAIT_RELEASE = """          wgmma_wait<0>();
          fence_operands(acc);
          if (w == kWaves - 1) release();
"""
# the kernel's acquire-ahead lines (whole-ring loop, stream loop) and the waits they precede
_ACQ_RING = "          if (w == kWaves - 1 && more) acquire(sc_next);\n"
_ACQ_STREAM = "          if (w == kWaves - 1 && g + 1 < stream) acquire(sc_next);\n"
_TILE_RING = "            begin_tile();\n          }\n" + _WAIT_RELEASE
_TILE_STREAM = "            begin_tile();  // unit < num_units: this block belongs to it\n          }\n" + _WAIT_RELEASE
RELFIRST = [(_ACQ_RING, ""), (_ACQ_STREAM, ""),
            (_TILE_RING, _TILE_RING + _ACQ_RING), (_TILE_STREAM, _TILE_STREAM + _ACQ_STREAM)]

_READY = """__device__ __forceinline__ bool mbar_ready(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\\n"
      ".reg .pred p;\\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
      "selp.u32 %0, 1, 0, p;\\n"
      "}\\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

"""


def _peek(acq: str) -> tuple[str, str]:
    """An acquire-ahead line made conditional on its stage being full already (PEEK adds the late
    acquire, after the release, for when it was not)."""
    cond = acq[acq.index("(") + 1:acq.rindex(") acquire")]
    ahead = ("          bool acquired = false;\n"
             f"          if ({cond} && mbar_ready(&s.full[stage], phase)) {{\n"
             "            acquire(sc_next);\n"
             "            acquired = true;\n"
             "          }\n")
    return acq, ahead


PEEK = ([("// A read-only load that the compiler keeps where it is written",
          _READY + "// A read-only load that the compiler keeps where it is written")]
        + [_peek(_ACQ_RING), _peek(_ACQ_STREAM)]
        + [(tile, tile + acq.replace(") acquire", " && !acquired) acquire"))
           for tile, acq in ((_TILE_RING, _ACQ_RING), (_TILE_STREAM, _ACQ_STREAM))])


_UNIT_COORDS = """  const int per_group = kGroupM * num_groups;
  const int group = unit / per_group;
  const int first_m = group * kGroupM;
  const int size_m = min(num_m - first_m, kGroupM);
  m_blk = first_m + (unit % per_group) % size_m;
  n_grp = (unit % per_group) / size_m;
"""


def _ngroup(groups: int):
    return [(_UNIT_COORDS, f"""  constexpr int kGroupN = {groups};  // column groups (CLUSTER column blocks each) walking together
  const int per_group = kGroupN * num_m;
  const int group = unit / per_group;
  const int first_n = group * kGroupN;
  const int size_n = min(num_groups - first_n, kGroupN);
  n_grp = first_n + (unit % per_group) % size_n;
  m_blk = (unit % per_group) / size_n;
""")]


GM16 = [("constexpr int kGroupM = 8;", "constexpr int kGroupM = 16;")]
_EXPECT = "          mbar_expect_tx(&s.full[stage], Cfg::kStageBytes + kSbBoxBytes);\n"
_SB_LOAD = "          tma_load_2d(&tma_sb, &s.full[stage], s.sb[stage], kb & ~3, nb0);\n"
TXLAST = [(_EXPECT, ""), (_SB_LOAD, _SB_LOAD + _EXPECT)]
_EPILOGUE_RING = "          if (w == 0 && close_previous) {  // the previous tile's epilogue, under this wave's wgmma\n"
_INDENT = re.compile(r"^(?=.)", re.M)
EPIWAIT = [(_EPILOGUE_RING,
            "          const bool early = kWaves == 1 && w == 0 && close_previous;\n"
            "          if (early) {  // stage 0 released before the previous tile's epilogue, not after it\n"
            + _INDENT.sub("  ", _WAIT_RELEASE.replace("if (w == kWaves - 1) ", ""))
            + "          }\n"
            "          if (w == 0 && close_previous) {\n"),
           (_TILE_RING, "            begin_tile();\n          }\n          if (!early) {\n"
            + _INDENT.sub("  ", _WAIT_RELEASE) + "          }\n")]


_WHOLE_PART = "    constexpr bool kWholePart = Cfg::kStagingBoxes == Cfg::kBoxesPerTile;\n"
_BOX_FREE_IF = "          if (!kWholePart && i > 0) {\n"
_BOX_FENCE_BAR = ("            fence_proxy_async();  // make the generic-proxy writes visible to the TMA (async proxy)\n"
                  "            named_barrier_sync(1 + c, 128);\n")
ONEBAR = [
    (_WHOLE_PART, _WHOLE_PART + "    constexpr bool kOneBar = Cfg::kStagingBoxes >= 2;\n"),
    (_BOX_FREE_IF, "          if (!kWholePart && !kOneBar && i > 0) {\n"),
    (_BOX_FENCE_BAR, _BOX_FENCE_BAR.replace(
        "            named_barrier_sync", "            if (kOneBar && t == 0 && i + 1 < kWaves * (BN / Cfg::kBoxCols))\n"
        "              bulk_wait_read<(Cfg::kStagingBoxes >= 2 ? Cfg::kStagingBoxes - 2 : 0)>();\n"
        "            named_barrier_sync")),
]
SBUF3 = [
    ("  static constexpr int kStagingBoxes = kHalfBoxes ? 2 : kFullBoxes;\n",
     "  static constexpr int kStagingBoxes = kHalfBoxes ? 3 : kFullBoxes;\n"),
    (_WHOLE_PART, _WHOLE_PART + "    int sbuf = 0;  // staging buffer of the tile's first box\n"),
    ("          uint8_t* box = s.staging[c][i % Cfg::kStagingBoxes];\n",
     "          uint8_t* box = s.staging[c][(sbuf + i) % Cfg::kStagingBoxes];\n"),
    ("      if constexpr (kWholePart) {\n        fence_proxy_async();\n",
     "      sbuf = (sbuf + kWaves * (BN / Cfg::kBoxCols)) % Cfg::kStagingBoxes;\n"
     "      if constexpr (kWholePart) {\n        fence_proxy_async();\n"),
]


_BOX_WRITE = """          for (int jj = 0; jj < Cfg::kBoxCols / 8; ++jj) {  // the box's 16-byte chunks a row
            const int j = bx * (Cfg::kBoxCols / 8) + jj;  // 8-column chunk of the wave
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = row_in_wave + 8 * h;
              const int sw = Cfg::kBoxCols == 64 ? r % 8 : (r >> 1) % 4;
              *reinterpret_cast<uint32_t*>(box + r * (2 * Cfg::kBoxCols) + ((jj ^ sw) * 16) + (lane % 4) * 4) =
                  packed[w][2 * j + h];
            }
          }
"""
_STSM_FN = """// Four 8x8 bf16 matrices from the warp's registers (a wgmma accumulator's fragment layout) into
// shared memory: lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void stsm_x4(const void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(p)), "r"(a), "r"(b),
               "r"(c), "r"(d)
               : "memory");
}

"""
STSM = [
    ("// TMA store of one box from shared memory;", _STSM_FN + "// TMA store of one box from shared memory;"),
    (_BOX_WRITE, """          for (int jj = 0; jj < Cfg::kBoxCols / 8; jj += 2) {  // chunks jj, jj + 1, both row halves
            const int j = bx * (Cfg::kBoxCols / 8) + jj;
            const int m = lane / 8;  // this lane addresses row lane % 8 of matrix m: chunk jj + m / 2, half m % 2
            const int r = warp * 16 + 8 * (m % 2) + lane % 8;
            const int sw = Cfg::kBoxCols == 64 ? r % 8 : (r >> 1) % 4;
            stsm_x4(box + r * (2 * Cfg::kBoxCols) + (((jj + m / 2) ^ sw) * 16), packed[w][2 * j], packed[w][2 * j + 1],
                    packed[w][2 * j + 2], packed[w][2 * j + 3]);
          }
"""),
]


_BOX_WAIT = "            if (t == 0) bulk_wait_read<Cfg::kStagingBoxes - 1>();\n"
_BOX_FREE = "            named_barrier_sync(1 + c, 128);  // box free\n"


SAMC = [("          tma_load_2d(&tma_sa, &s.full[stage], s.sa[stage], m_blk * BM, kb);\n",
         """          if constexpr (CLUSTER > 1) {
            if (rank == 0)
              tma_load_2d_multicast(&tma_sa, &s.full[stage], s.sa[stage], m_blk * BM, kb,
                                    static_cast<uint16_t>((1 << CLUSTER) - 1));
          } else {
            tma_load_2d(&tma_sa, &s.full[stage], s.sa[stage], m_blk * BM, kb);
          }
""")]


_EPI_HEAD = "    auto epilogue = [&] {\n"
_EPI_SPLITK_W = ("        for (int w = 0; w < kWaves; ++w) {\n#pragma unroll\n"
                 "          for (int h = 0; h < 2; ++h) {\n")
_EPI_BIAS = "        if (t + 128 * i < BN) sts_ordered(&s.bias[c][t + 128 * i], bias_r[i]);\n"
_EPI_W = ("      for (int w = 0; w < kWaves; ++w) {\n#pragma unroll\n"
          "        for (int bx = 0; bx < BN / Cfg::kBoxCols; ++bx) {\n")
_EPI_RING_CALL = (_ACQ_RING + _EPILOGUE_RING + "            epilogue();\n            unit += num_clusters;\n"
                  "            begin_tile();\n          }\n")
SPLITEPI = [
    (_EPI_HEAD, "    auto epilogue = [&](int only_w = -1) {  // only_w: that wave's part alone; -1: every wave\n"),
    (_EPI_SPLITK_W, _EPI_SPLITK_W.replace("{\n#pragma", "{\n          if (only_w >= 0 && w != only_w) continue;\n#pragma", 1)),
    (_EPI_BIAS, _EPI_BIAS.replace("if (t + ", "if (only_w <= 0 && t + ")),
    (_EPI_W, _EPI_W.replace("{\n#pragma", "{\n        if (only_w >= 0 && w != only_w) continue;\n#pragma", 1)),
    (_EPI_RING_CALL,
     "          if (close_previous) {  // wave w's part of the previous tile's epilogue, under its wgmma\n"
     "            epilogue(w);\n"
     "            if (w == kWaves - 1) {\n"
     "              unit += num_clusters;\n"
     "              begin_tile();\n"
     "            }\n"
     "          }\n" + _ACQ_RING),  # the next stage acquired after the epilogue: its scales not live in it
]


_RING_LOOP = """      for (int u = 0; u < my_units; ++u)
        for (int r = 0; r < revs; ++r)
#pragma unroll
          for (int i = 0; i < kStages; ++i) {
            stage = release_stage = i;
            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, i == 0 && r == 0 && u > 0);
          }
      if (my_units > 0 && pair_exchange()) epilogue();
"""
EPIAFTER = [
    (_RING_LOOP, """      for (int u = 0; u < my_units; ++u) {
        for (int r = 0; r < revs; ++r)
#pragma unroll
          for (int i = 0; i < kStages; ++i) {
            stage = release_stage = i;
            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, false);
          }
        if (u + 1 < my_units || pair_exchange()) epilogue();
        if (u + 1 < my_units) {
          unit += num_clusters;
          begin_tile();
        }
      }
"""),
    ("""        if (++kb == kblocks) {
          kb = 0;
          epilogue_due = true;
        }
      };
      if constexpr (kWaves == 2) {""", """        if (++kb == kblocks) {
          kb = 0;
          if (g + 1 < stream || pair_exchange()) epilogue();
          if (g + 1 < stream) {
            unit += num_clusters;
            begin_tile();
          }
        }
      };
      if constexpr (kWaves == 2) {"""),
]


def _stagger(cycles: int):
    return [("    const int c = wg - 1;\n",
             "    const int c = wg - 1;\n"
             f"    if (c > 0) {{  // consumer c starts c x {cycles} cycles late\n"
             "      const long long t0 = clock64();\n"
             f"      while (clock64() - t0 < {cycles}LL * c) {{\n"
             "      }\n"
             "    }\n")]

# cvtint: bf16 rounding of the epilogue in integer operations (finite values)
CVTINT = [("""  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
""", """  uint32_t a = __float_as_uint(lo), b = __float_as_uint(hi);
  a += 0x7fffu + ((a >> 16) & 1u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return __byte_perm(a, b, 0x7632);
""")]


PDL = [
    ('  if (p.splits > 1 && !p.pair_k) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n',
     '  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n'),
    ("  else __syncthreads();\n\n",
     '  else __syncthreads();\n  asm volatile("griddepcontrol.wait;" ::: "memory");\n\n'),
    ("""  if constexpr (CLUSTER == 1) {
    fp8_gemm_kernel<BM, BN, 1, kWholeRing><<<grid, threads, smem, stream>>>(ma, mb, md, msa, msb, pp);
  } else {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch(grid, CLUSTER, threads, smem, stream, attr);
    if (cudaLaunchKernelEx(&cfg, fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, msb, pp) != cudaSuccess)
      return "cudaLaunchKernelEx (cluster launch) failed";
  }
""", """  {
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t cfg = cluster_launch(grid, CLUSTER, threads, smem, stream, attrs[1]);
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = CLUSTER > 1 ? 2 : 1;
    if (cudaLaunchKernelEx(&cfg, fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, msb, pp) != cudaSuccess)
      return "cudaLaunchKernelEx failed";
  }
"""),
]


# the epilogue's wait for its first staging box and its store of a box
_FIRST_BOX_WAIT = "      if (t == 0) bulk_wait_read<kWholePart ? 0 : Cfg::kStagingBoxes - 1>();\n"
_STORE_BOX = """      const auto store = [&](int w, int bx, const uint8_t* box) {  // one thread: the box's TMA store
        if (row0 + w * 64 < p.M && n0 + bx * Cfg::kBoxCols < p.N)
          tma_store_2d(&tma_d, box, n0 + bx * Cfg::kBoxCols, row0 + w * 64);
      };
"""
# warpbox: each warp stages its own 16 rows of a box and its lane 0 stores them (a 16-row TMA box),
# waiting only for its own earlier stores: one named barrier of the consumer's warps a tile (the bias)
WARPBOX = [
    (_FIRST_BOX_WAIT,
     "      if (lane == 0) bulk_wait_read<kWholePart ? 0 : Cfg::kStagingBoxes - 1>();\n"),
    (_STORE_BOX, """      const auto store = [&](int w, int bx, const uint8_t* box) {  // lane 0: the warp's 16 rows of the box
        const int row = row0 + w * 64 + warp * 16;
        if (row < p.M && n0 + bx * Cfg::kBoxCols < p.N)
          tma_store_2d(&tma_d, box + warp * 16 * (2 * Cfg::kBoxCols), n0 + bx * Cfg::kBoxCols, row);
      };
"""),
    ("""            if (t == 0) bulk_wait_read<Cfg::kStagingBoxes - 1>();
            named_barrier_sync(1 + c, 128);  // box free
""", """            if (lane == 0) bulk_wait_read<Cfg::kStagingBoxes - 1>();
            __syncwarp();
"""),
    ("""            fence_proxy_async();  // make the generic-proxy writes visible to the TMA (async proxy)
            named_barrier_sync(1 + c, 128);
            if (t == 0) {
""", """            fence_proxy_async();  // make the generic-proxy writes visible to the TMA (async proxy)
            __syncwarp();
            if (lane == 0) {
"""),
    ("""        fence_proxy_async();
        named_barrier_sync(1 + c, 128);
        if (t == 0) {
""", """        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
"""),
    ("    if (t == 0) bulk_wait_read<0>();\n  }\n}\n", "    if (t % 32 == 0) bulk_wait_read<0>();\n  }\n}\n"),
    ("Config<BM, BN, CLUSTER>::kBoxCols, 64,", "Config<BM, BN, CLUSTER>::kBoxCols, 16,"),
]


def _stgpk(src: str) -> str:
    """stgpk: the packed part stored straight to global memory, each quad transposing its row's four
    8-column chunks with shuffles so that every lane stores 16 bytes: no staging, no TMA store, one
    barrier a tile (the bias)."""
    v = "stgpk"
    src = replace_once(src, _FIRST_BOX_WAIT, "", v)
    start = src.index(_STORE_BOX)
    end = src.index("    // this CTA's units are cluster_id")
    body = """      const int q = lane % 4;
      const bool q0 = q & 1, q1 = q & 2;
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + w * 64 + row_in_wave + 8 * h;
          __nv_bfloat16* drow = p.d + static_cast<int64_t>(row) * p.ldd + n0;
#pragma unroll
          for (int g = 0; g < NJ / 4; ++g) {
            uint32_t x[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) x[k] = packed[w][2 * (4 * g + k) + h];
            uint32_t r = __shfl_xor_sync(0xffffffff, q0 ? x[0] : x[1], 1);
            if (q0) x[0] = r; else x[1] = r;
            r = __shfl_xor_sync(0xffffffff, q0 ? x[2] : x[3], 1);
            if (q0) x[2] = r; else x[3] = r;
            r = __shfl_xor_sync(0xffffffff, q1 ? x[0] : x[2], 2);
            if (q1) x[0] = r; else x[2] = r;
            r = __shfl_xor_sync(0xffffffff, q1 ? x[1] : x[3], 2);
            if (q1) x[1] = r; else x[3] = r;
            const int col = 8 * (4 * g + q);
            if (row < p.M && n0 + col < p.N)
              asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(drow + col), "r"(x[0]), "r"(x[1]),
                           "r"(x[2]), "r"(x[3])
                           : "memory");
          }
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
      }
    };

"""
    return src[:start] + body + src[end:]

# lent: the epilogue staged in the tile's last stage, held until the stores have read it
LENT = [
    ("    uint64_t empty[kStages];\n",
     "    uint64_t empty[kStages];\n    uint64_t lent_free;  // every consumer is done with the lent stage's B tile\n"),
    ("      mbar_init(&s.empty[i], kConsumers * 4 * CLUSTER);  // lane r of every consumer warp of both CTAs\n    }\n",
     "      mbar_init(&s.empty[i], kConsumers * 4 * CLUSTER);  // lane r of every consumer warp of both CTAs\n    }\n"
     "    mbar_init(&s.lent_free, kConsumers * 4);  // lane 0 of every consumer warp\n"),
    (_WHOLE_PART,
     _WHOLE_PART + """    constexpr bool kLent = kWholeRing && Cfg::kHalfBoxes;
    constexpr int kHalfBoxBytes = 64 * 32 * 2;
    constexpr int kLentA = kRowsC * BK / kHalfBoxBytes, kLentB = BN * BK / kConsumers / kHalfBoxBytes;
    static_assert(!kLent || kLentA + kLentB + Cfg::kStagingBoxes == kWaves * BN / 32, "lent stage");
    // box i of the part: the consumer's A rows, then its staging, then its half of the B tile
    const auto lent_box = [&](int i) -> uint8_t* {
      if (i < kLentA) return s.a[kStages - 1] + c * kRowsC * BK + i * kHalfBoxBytes;
      if (i < kLentA + Cfg::kStagingBoxes) return s.staging[c][i - kLentA];
      return s.b[kStages - 1] + c * (BN * BK / kConsumers) + (i - kLentA - Cfg::kStagingBoxes) * kHalfBoxBytes;
    };
    uint32_t lent_phase = 0;
"""),
    (_FIRST_BOX_WAIT, _FIRST_BOX_WAIT.replace("if (t == 0)", "if (!kLent && t == 0)")),
    ("""          uint8_t* box = s.staging[c][i % Cfg::kStagingBoxes];
          if (!kWholePart && i > 0) {""", """          uint8_t* box = kLent ? lent_box(i) : s.staging[c][i % Cfg::kStagingBoxes];
          if constexpr (kLent) {
            if (i == kLentA + Cfg::kStagingBoxes) {  // the B tile: every consumer is done with it
              mbar_wait(&s.lent_free, lent_phase);
              lent_phase ^= 1;
            }
          } else if (!kWholePart && i > 0) {"""),
    ("          if constexpr (!kWholePart) {\n            fence_proxy_async();",
     "          if constexpr (!kWholePart && !kLent) {\n            fence_proxy_async();"),
    ("""      if constexpr (kWholePart) {
        fence_proxy_async();
        named_barrier_sync(1 + c, 128);
        if (t == 0) {
#pragma unroll
          for (int w = 0; w < kWaves; ++w)
#pragma unroll
            for (int bx = 0; bx < BN / Cfg::kBoxCols; ++bx) store(w, bx, s.staging[c][w * (BN / Cfg::kBoxCols) + bx]);
          bulk_commit();
        }
      }
    };
""", """      if constexpr (kWholePart || kLent) {
        fence_proxy_async();
        named_barrier_sync(1 + c, 128);
        if (t == 0) {
#pragma unroll
          for (int w = 0; w < kWaves; ++w)
#pragma unroll
            for (int bx = 0; bx < BN / Cfg::kBoxCols; ++bx) {
              const int i = w * (BN / Cfg::kBoxCols) + bx;
              store(w, bx, kLent ? lent_box(i) : s.staging[c][i]);
            }
          bulk_commit();
        }
      }
    };
    const auto release_lent = [&] {  // the lent stage back, once the TMA has read its boxes
      if (t == 0) bulk_wait_read<0>();
      __syncwarp();
      if constexpr (CLUSTER > 1) {
        if (lane < CLUSTER) mbar_arrive_cluster(&s.empty[kStages - 1], lane);
      } else if (lane == 0) {
        mbar_arrive(&s.empty[kStages - 1]);
      }
    };
"""),
    ("      auto block = [&](bool more, bool close_previous) {  // more: a block follows (acquire it ahead)\n",
     "      auto block = [&](bool more, bool close_previous, bool lend, bool give_back) {\n"),
    ("            begin_tile();\n          }\n" + _WAIT_RELEASE + "          promote(w, acc, sc);\n        }\n      };\n",
     """            begin_tile();
          }
          if (w == 0 && give_back) release_lent();
          wgmma_wait<0>();
          fence_operands(acc);
          if (w == kWaves - 1) {
            if (lend) {
              if (lane == 0) mbar_arrive(&s.lent_free);
            } else {
              release();
            }
          }
          promote(w, acc, sc);
        }
      };
"""),
    ("            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, i == 0 && r == 0 && u > 0);\n"
     "          }\n      if (my_units > 0 && pair_exchange()) epilogue();\n",
     "            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, i == 0 && r == 0 && u > 0,\n"
     "                  kLent && i == kStages - 1 && r + 1 == revs, kLent && i == 1 && r == 0 && u > 0);\n"
     "          }\n      if (my_units > 0 && pair_exchange()) {\n        epilogue();\n        if constexpr (kLent) release_lent();\n      }\n"),
]

# twowaves: both waves of a tile's first block under the previous tile's epilogue (the promotion
# lines themselves get their first-block form in _twowaves)
TWOWAVES = [
    ("""    // total[w] += (sa * sb) * acc: the per-128-K promotion into fp32
    auto promote = [&](int w, const float (&acc)[BN / 2], const Scales& sc) {""",
     """    // total[w] += (sa * sb) * acc: the per-128-K promotion into fp32 (first: a tile's first block,
    // total[w] = (sa * sb) * acc, where the previous tile's totals are no longer held)
    auto promote = [&](int w, const float (&acc)[BN / 2], const Scales& sc, bool first = false) {"""),
    ("""    // rows past M and columns past N. Then the next tile begins with a zero total.
    constexpr bool kWholePart = Cfg::kStagingBoxes == Cfg::kBoxesPerTile;
    auto epilogue = [&] {
""",
     """    // rows past M and columns past N. Then the next tile begins with a zero total. In two halves:
    // the head ends the totals (split-K: their fp32 partials stored; else packed into bf16 pairs),
    // the tail stages and stores the pairs, so a two-wave consumer can queue its second wave's
    // wgmma between them (the whole-ring loop).
    constexpr bool kWholePart = Cfg::kStagingBoxes == Cfg::kBoxesPerTile;
    uint32_t packed[kWaves][BN / 4];
    auto epilogue_head = [&] {
"""),
    ("""                  dst[8 * j] = total[w][4 * j + 2 * h], dst[8 * j + 1] = total[w][4 * j + 2 * h + 1];
            }
          }
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
        }
        return;
      }""",
     """                  dst[8 * j] = total[w][4 * j + 2 * h], dst[8 * j + 1] = total[w][4 * j + 2 * h + 1];
            }
          }
        }
        // every head writes the pairs, so the compiler sees them dead between a tail and the next head
#pragma unroll
        for (int w = 0; w < kWaves; ++w)
#pragma unroll
          for (int i = 0; i < BN / 4; ++i) packed[w][i] = 0;
        return;
      }"""),
    ("""      // below hold half the registers the fp32 totals did.
      uint32_t packed[kWaves][BN / 4];
#pragma unroll""",
     """      // below hold half the registers the fp32 totals did.
#pragma unroll"""),
    ("""            packed[w][2 * j + h] = pack_bf16(total[w][4 * j + 2 * h] + bv.x, total[w][4 * j + 2 * h + 1] + bv.y);
        }
""",
     """            packed[w][2 * j + h] = pack_bf16(total[w][4 * j + 2 * h] + bv.x, total[w][4 * j + 2 * h + 1] + bv.y);
        }
    };
    auto epilogue_tail = [&] {
      if (p.splits > 1) return;
"""),
    ("""          }
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
      }
      if constexpr (kWholePart) {""",
     """          }
        }
      }
      if constexpr (kWholePart) {"""),
    ("""          bulk_commit();
        }
      }
    };
""",
     """          bulk_commit();
        }
      }
    };
    auto epilogue = [&] {
      epilogue_head();
      epilogue_tail();
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
    };
"""),
    ("""      auto block = [&](bool more, bool close_previous) {  // more: a block follows (acquire it ahead)
        sc = sc_next;
#pragma unroll""",
     """      float acc_w1[BN / 2];  // wave 1's accumulator in a tile's first block (two-wave tiles)
      auto block = [&](bool more, bool close_previous) {  // more: a block follows (acquire it ahead)
        sc = sc_next;
        if (kWaves == 2 && close_previous) {
          // The previous tile's epilogue under both waves' wgmma, twice the tensor work the
          // one-accumulator order queues under it: the head packs the totals into bf16 pairs
          // (half their registers), which leaves room for wave 1's own accumulator, issued before
          // the tail stages and stores the pairs. The tile's first promotions then start the
          // totals afresh.
          issue(acc, 0);
          epilogue_head();
          issue(acc_w1, kWaves - 1);
          if (more) acquire(sc_next);
          epilogue_tail();
          unit += num_clusters;
          begin_tile();
          wgmma_wait<1>();
          fence_operands(acc);
          promote(0, acc, sc, true);
          fence_operands(total[0]);  // wave 0's promotion under wave 1's wgmma, not sunk below its wait
          wgmma_wait<0>();
          fence_operands(acc_w1);
          release();
          promote(kWaves - 1, acc_w1, sc, true);
          return;
        }
#pragma unroll"""),
]


def _twowaves(src: str) -> str:
    """twowaves: the promotion lines in their first-block form, then the TWOWAVES replacements."""
    start, end = promotion_span(src)
    promotion, n = FMA.subn(r"\1 = first ? \3 * \4 : fmaf(\3, \4, \1);", src[start:end])
    if n != 4:
        raise SystemExit(f"twowaves: the promotion no longer has the four fmaf lines it rewrites ({n})")
    src = src[:start] + promotion + src[end:]
    for old, new in TWOWAVES:
        src = replace_once(src, old, new, "twowaves")
    return src


_INIT_END = ('    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");\n  }\n')
_PRODUCER_START = ("      int stage = 0;\n      uint32_t phase = 0;\n"
                   "      for (int unit = cluster_id; unit < num_units; unit += num_clusters) {\n")
_PRODUCER_KB = ("        for (int kb = kb0; kb < kb0 + kblocks; ++kb) {\n"
                "          mbar_wait(&s.empty[stage], phase ^ 1);\n")
EARLY = [
    (_INIT_END, _INIT_END.replace("  }\n", """    if (CLUSTER == 1 && !p.pair_k && cluster_id < num_units) {  // early: the first ring now
      int m_blk, n_grp;
      unit_coords(cluster_id / p.splits, num_m, num_groups, m_blk, n_grp);
      const int kb0 = cluster_id % p.splits * kblocks;
      const int a_row = m_blk * BM < p.M ? m_blk * BM : 0;
      const int n_blk = n_grp < num_n ? n_grp : 0;
      const int nb0 = min(n_blk * BN / 128, nblocks128 - 1);
      for (int i = 0; i < kStages && i < kblocks; ++i) {
        const int kb = kb0 + i;
        mbar_expect_tx(&s.full[i], Cfg::kStageBytes + kSbBoxBytes);
        tma_load_2d(&tma_a, &s.full[i], s.a[i], kb * BK, a_row);
        tma_load_2d(&tma_b, &s.full[i], s.b[i], kb * BK, n_blk * BN);
        tma_load_2d(&tma_sa, &s.full[i], s.sa[i], m_blk * BM, kb);
        tma_load_2d(&tma_sb, &s.full[i], s.sb[i], kb & ~3, nb0);
      }
    }
  }
""")),
    (_PRODUCER_START, "      int early = CLUSTER == 1 && !p.pair_k && cluster_id < num_units ? min(kStages, kblocks) : 0;\n"
     + _PRODUCER_START),
    (_PRODUCER_KB, _PRODUCER_KB.replace("          mbar_wait", """          if (early > 0) {  // issued at the start already
            --early;
            if (++stage == kStages) {
              stage = 0;
              phase ^= 1;
            }
            continue;
          }
          mbar_wait""")),
]


# the kernel body's first line: noop and stamps insert their line after it
_CFG_LINE = "  using Cfg = Config<BM, BN, CLUSTER>;\n"

# stamps: a CTA's SM, start and end as 5 words of g_cta_stamps (global ns at entry, global ns at the
# last warp's exit, SM cycles at entry, SM cycles at that exit, SM id); the destructor of a local
# object runs at every return of the kernel, whichever role's path it ends
STAMPS = [("template <int BM, int BN, int CLUSTER, bool kWholeRing>\n__global__ void",
           """constexpr int kStampCtas = 4096;
__device__ unsigned long long g_cta_stamps[5 * kStampCtas];  // timing only (stamps)
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct CtaStamp {  // no members: nothing held in registers across the kernel
  __device__ static unsigned long long* slot() { return blockIdx.x < kStampCtas ? g_cta_stamps + 5 * blockIdx.x : nullptr; }
  __device__ CtaStamp() {
    unsigned long long* w = slot();
    if (w && threadIdx.x == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      w[0] = global_ns();
      w[2] = clock64();
      w[4] = sm;
    }
  }
  __device__ ~CtaStamp() {
    unsigned long long* w = slot();
    if (w && threadIdx.x % 32 == 0) {
      atomicMax(w + 1, global_ns());
      atomicMax(w + 3, static_cast<unsigned long long>(clock64()));
    }
  }
};

template <int BM, int BN, int CLUSTER, bool kWholeRing>
__global__ void"""),
          (_CFG_LINE, _CFG_LINE + "  const CtaStamp cta_stamp;  // timing only\n")]


# variant -> the (old, new) line replacements it makes, each old text found exactly once
REPLACEMENTS = {
    "hint": HINT,
    "cvtint": CVTINT,
    "relfirst": RELFIRST,
    "peek": PEEK,
    "c192": C192,
    "rank0a": RANK0A,
    "ngroup": _ngroup(16),
    "ngroup8": _ngroup(8),
    "ngroup32": _ngroup(32),
    "gm16": GM16,
    "txlast": TXLAST,
    "epiwait": EPIWAIT,
    "nostorewait": [(_BOX_WAIT, "")],
    "samc": SAMC,
    "splitepi": SPLITEPI,
    "epiafter": EPIAFTER,
    "nostore": [("          tma_store_2d(&tma_d, box, n0 + bx * Cfg::kBoxCols, row0 + w * 64);\n",
                 "          if (p.M < 0) tma_store_2d(&tma_d, box, n0 + bx * Cfg::kBoxCols, row0 + w * 64);  // timing only\n")],
    "noop": [(_CFG_LINE, _CFG_LINE + "  if (p.M > 0) return;  // timing only: the launch alone\n")],
    "stamps": STAMPS,
    "nobar": [(_BOX_FREE, ""), (_BOX_FENCE_BAR, "")],
    "noepi": [(_EPI_HEAD, _EPI_HEAD + """      if (p.M > 0) {  // timing only: no stores
#pragma unroll
        for (int w = 0; w < kWaves; ++w)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
        return;
      }
""")],
    "stagger": _stagger(1024),
    "stagger2": _stagger(2048),
    "pdl": PDL,
    "early": EARLY,
    "warpbox": WARPBOX,
    "lent": LENT,
    "onebar": ONEBAR,
    "stsm": STSM,
    "sbuf3": SBUF3,
    "boxes": [(STAGES, "  static constexpr int kStages = fit(kBoxesPerTile) >= 3 ? fit(kBoxesPerTile) : fit(1);\n")],
}


FUNCTIONS: dict = {"stgpk": _stgpk, "twowaves": _twowaves}  # variant -> a function rewriting the source


PROMOTION_VARIANTS = ("nopromote", "fadd", "muladd")  # rewrites of the promotion (rewrite below)


def structural(src: str, variant: str) -> str:
    if variant in FUNCTIONS:
        return FUNCTIONS[variant](src)
    if variant not in REPLACEMENTS:
        return rewrite(src, variant)
    for old, new in REPLACEMENTS[variant]:
        src = replace_once(src, old, new, variant)
    return src


def rewrite(src: str, variant: str) -> str:
    start, end = promotion_span(src)
    body_start = src.index("\n", src.index("const float sb1", start)) + 1
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
        body = FMA.sub(r"\1 = \2__fadd_rn(\1, __fmul_rn(\3, \4));", body)
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
