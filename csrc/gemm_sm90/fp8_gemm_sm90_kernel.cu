// Blockwise FP8 GEMM for sm_90a: D[M, N] (bf16) = sum_kb sa[m, kb] * sb[n/128, kb] * (A_kb . B_kb^T) + bias.
//
// Persistent and warp-specialized, in the style of DeepGEMM. One CTA per SM walks output tiles of
// BM x BN (BM = 128, 192 or 256; BN = 128, or 64 / 192 with BM = 128), grouped so that neighbouring
// CTAs share B panels in L2. Warpgroup 0 is the producer: one thread issues TMA loads of the A and
// B tiles (128-byte swizzle), of A's 1x128 scales for the tile rows and of B's 128x128 scales (the
// 16-byte aligned run of 4 K blocks holding the stage's), into a kStages-deep ring guarded by
// "full" / "empty" mbarriers: every shared-memory write of the ring is the TMA's. With
// CLUSTER = 2 the two CTAs of a cluster take horizontally adjacent tiles (same rows of A): each loads
// half of the A tile and multicasts it to both; consumers then release a stage to both CTAs'
// producers.
// The other warpgroups are consumers: two with BM/2 rows each (three of 64 rows for BM = 192), done
// as waves of 64 rows: per 128-wide K block a wave runs four wgmma m64nBNk32 (e4m3 x e4m3, fp32
// accumulate) into a fresh accumulator and promotes it into the fp32 total with the block's scales
// (both read from the stage in shared memory), so nothing accumulates in the tensor cores' reduced
// precision beyond one 128-K block. The consumers run unsynchronized with each other, so one
// promotes while another's wgmma run. A tile's epilogue runs after the next tile's first wave is
// issued, under its wgmma; the consumer loop is one of three (whole ring, two accumulators at
// 128x128 and 128x64, any-K stream), chosen per instantiation and by K (see there). Epilogue: fp32
// bias (loaded when the tile begins), one bf16 rounding, the tile staged in shared memory as 64x64
// TMA boxes (128-byte swizzle: no bank conflicts) and stored by TMA, which clips rows past M, while
// the consumers go on. TMA zero-fills operand rows past M / N. N and K must be multiples of 128
// (checked on the host, in Python).
#include "fp8_gemm_sm90.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

namespace ltx_gemm_sm90 {
namespace {

constexpr int BK = 128;
constexpr int kGroupM = 8;
constexpr int kSmemLimit = 232448;  // sm_90 opt-in maximum per block (227 KB)

template <int BM, int BN, int CLUSTER>
struct Config {
  static_assert(BM == 128 || BM == 192 || BM == 256, "BM is 128, 192 or 256");
  static_assert(BN == 128 || ((BN == 64 || BN == 192) && BM == 128), "BN is 128, or 64 / 192 with BM = 128");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs");
  static_assert(BM != 192 || CLUSTER == 1, "BM = 192 runs without clusters");
  // BM = 192: three consumer warpgroups of 64 rows (the register file holds three at 160
  // registers a thread); else two of BM / 2 rows.
  static constexpr int kConsumers = BM == 192 ? 3 : 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kRowsPerConsumer = BM / kConsumers;
  static constexpr int kWaves = kRowsPerConsumer / 64;  // 64-row waves per consumer warpgroup
  static constexpr int kStageBytes = (BM + BN) * BK + BM * 4;  // A and B tiles, A's scales
  // The epilogue stages its output in 8 KB of bf16 per box (one TMA store each), reusing a box
  // once the TMA has read it. Each consumer gets as many 64 x 64 boxes as fit without costing a
  // pipeline stage; the stores run under the next tile's first wave anyway. (Against whole-wave
  // staging, which cost 128x128 / 256x128 / 128x192 one stage each, this measured neutral.) Where
  // that one box carries four stores a tile (256x128), its 8 KB are two 64 x 32 boxes with the
  // 64-byte swizzle instead: one is written while the TMA still reads the other, where a single box
  // made each store wait for the one just issued (faster at most shapes measured). With one or
  // two stores a tile (128x64, 128x128) the halves only add barriers to an epilogue that small M
  // leaves exposed (1-2 % slower there), so those keep the whole box.
  static constexpr int kBoxBytes = 64 * 64 * 2;
  static constexpr int kBoxesPerTile = kWaves * BN / 64;  // per consumer
  static constexpr int kFixedBytes = kConsumers * BN * 4 + 2048;  // bias copies, barriers, B scales
  static constexpr int fit(int boxes) {
    const int n = (kSmemLimit - 1024 - kConsumers * boxes * kBoxBytes - kFixedBytes) / kStageBytes;
    return n < 6 ? n : 6;
  }
  static constexpr int kStages = fit(1);
  static constexpr int kFullBoxes = fit(kBoxesPerTile) == kStages ? kBoxesPerTile
                                    : fit(2) == kStages            ? 2
                                                                   : 1;
  static constexpr bool kHalfBoxes = kFullBoxes == 1 && kBoxesPerTile >= 4;
  static constexpr int kBoxCols = kHalfBoxes ? 32 : 64;  // a staging box's columns
  static constexpr int kStagingBoxes = kHalfBoxes ? 2 : kFullBoxes;
  // Pair-K: a consumer's fp32 part of the tile (kRowsPerConsumer x BN) fits in its A rows of all
  // stages (kRowsPerConsumer x BK bytes each), where the peer CTA writes it; not at 128x192.
  static constexpr bool kPairFits = BN * 4 <= kStages * BK;
  struct alignas(1024) Smem {
    uint8_t a[kStages][BM * BK];
    uint8_t b[kStages][BN * BK];
    uint8_t staging[kConsumers][kStagingBoxes][64 * kBoxCols * 2];
    float sa[kStages][BM];  // the tile rows' 1x128 scales of each stage's K block
    // the stage's B-scale box: 4 K blocks of the tile's first (and, BN = 192, second) 128-column
    // block, the row's 16-byte aligned run holding the stage's K block
    alignas(128) float sb[kStages][32];
    float bias[kConsumers][BN];  // each consumer's copy of the tile's bias, for its epilogue
    uint64_t full[kStages];
    uint64_t empty[kStages];
    uint64_t pair_full[kConsumers];  // pair-K, rank 0: the peer's partial has landed (its bytes)
    uint64_t pair_free[kConsumers];  // pair-K, rank 1: phase 0 the receiver's rows are free, 1 the copy is done
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Smem)) + 1024;  // + slack to align the base
  static_assert(kStages >= 3 && kSmemBytes <= kSmemLimit, "tile does not fit in shared memory");
  static_assert(kStagingBoxes >= 1, "no room for an epilogue box");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes));
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same offset in CTA `cta` of this cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// The shared-memory address `addr` of this CTA as the same offset in CTA `cta` of the cluster.
__device__ __forceinline__ uint32_t map_to_cta(uint32_t addr, uint32_t cta) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(cta));
  return r;
}

// Arrive on the barrier at the same offset in CTA `cta`, releasing this thread's earlier memory
// operations at cluster scope.
__device__ __forceinline__ void mbar_arrive_cluster_release(uint64_t* bar, uint32_t cta) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(map_to_cta(smem_addr(bar), cta))
               : "memory");
}

// Wait for a phase completed by arrivals from the peer CTA, acquiring what they released.
__device__ __forceinline__ void mbar_wait_cluster_acquire(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "LTX_WAITC_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LTX_WAITC_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "LTX_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LTX_WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// A read-only load that the compiler keeps where it is written (asm volatile statements keep their
// order): the scale loads must be issued a whole k-block before their use, not sunk next to it.
__device__ __forceinline__ float ldg_ordered(const float* ptr) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(ptr));
  return v;
}

__device__ __forceinline__ void sts_ordered(float* ptr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(smem_addr(ptr)), "f"(v) : "memory");
}

__device__ __forceinline__ float lds_ordered(const float* ptr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr(ptr)));
  return v;
}

// `bytes` (a multiple of 16) from this CTA's shared memory to the same offset in CTA `cta`, the
// bytes counted on that CTA's barrier at `bar`'s offset (bulk copy: the TMA unit, async proxy).
__device__ __forceinline__ void bulk_copy_to_cta(const void* src, uint32_t bytes, uint64_t* bar, uint32_t cta) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   map_to_cta(smem_addr(src), cta)),
               "r"(smem_addr(src)), "r"(bytes), "r"(map_to_cta(smem_addr(bar), cta))
               : "memory");
}

__device__ __forceinline__ void sts_addr(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ float lds_addr(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Relaxed: the only writes the peer must see are the barrier inits, which thread 0 releases with
// fence.mbarrier_init before it arrives. A release arrive compiles to MEMBAR.ALL.GPU for every thread.
__device__ __forceinline__ void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void tma_load_2d(const CUtensorMap* map, uint64_t* bar, void* dst, int c_inner, int c_row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c_inner), "r"(c_row), "r"(smem_addr(bar))
      : "memory");
}

// The same box written to the same shared-memory offset of every CTA in `mask`, each CTA's barrier
// at `bar`'s offset receiving the bytes.
__device__ __forceinline__ void tma_load_2d_multicast(const CUtensorMap* map, uint64_t* bar, void* dst, int c_inner,
                                                      int c_row, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c_inner), "r"(c_row), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}

// Shared-memory matrix descriptor: K-major tile, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_addr(p);
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= static_cast<uint64_t>(1) << 16;          // leading byte offset (unused for swizzled K-major)
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;  // stride byte offset
  desc |= static_cast<uint64_t>(1) << 62;          // 128B swizzle
  return desc;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>  // until at most N committed wgmma groups of this warpgroup are pending
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// Pins the accumulator registers at this point of the instruction stream: reads of an accumulator
// may not be hoisted above the wait that completes its wgmma (ptxas would then serialize them).
template <int R>
__device__ __forceinline__ void fence_operands(float (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Two fp32 values rounded to bf16 (round to nearest even), packed low then high.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// TMA store of one box from shared memory; completion is tracked per thread in bulk async-groups.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c_inner, int c_row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c_inner), "r"(c_row), "r"(smem_addr(src))
               : "memory");
}
// An empty group is fine: it keeps one group per staging-buffer use, which bulk_wait_read counts on.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>  // until at most N of this thread's store groups may still read shared memory
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// The accumulator operand lists of the wgmma below. The accumulator is always "+f" (read and
// written), also for a block's first wgmma with scale-d = 0: "=f" would let ptxas give the new
// block other registers while the previous block's values are still live, and spill.
#define LTX_ACC8(C, i) C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define LTX_ACC32(C) LTX_ACC8(C, 0), LTX_ACC8(C, 8), LTX_ACC8(C, 16), LTX_ACC8(C, 24)
#define LTX_ACC64(C) LTX_ACC32(C), LTX_ACC8(C, 32), LTX_ACC8(C, 40), LTX_ACC8(C, 48), LTX_ACC8(C, 56)
#define LTX_ACC96(C) LTX_ACC64(C), LTX_ACC8(C, 64), LTX_ACC8(C, 72), LTX_ACC8(C, 80), LTX_ACC8(C, 88)
#define LTX_WGMMA(N, REGS, DESC_A, DESC_B, SCALE_D) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"   \
  "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, " DESC_A ", " DESC_B ", p, 1, 1;\n}\n"
#define LTX_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define LTX_REGS64 \
  LTX_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
             "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LTX_REGS96                                                                                                  \
  LTX_REGS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, " \
             "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// d = A . B^T (+ d when kAccumulate): one m64nBNk32 step with both operands in shared memory
template <int BN, bool kAccumulate>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b) {
  constexpr int scale_d = kAccumulate ? 1 : 0;
  if constexpr (BN == 64) {
    asm volatile(LTX_WGMMA(64, LTX_REGS32, "%32", "%33", "%34") : LTX_ACC32("+f") : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else if constexpr (BN == 128) {
    asm volatile(LTX_WGMMA(128, LTX_REGS64, "%64", "%65", "%66") : LTX_ACC64("+f") : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(BN == 192, "wgmma n64, n128 or n192");
    asm volatile(LTX_WGMMA(192, LTX_REGS96, "%96", "%97", "%98") : LTX_ACC96("+f") : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }

// Work unit u -> (row block, column group); a column group is CLUSTER adjacent column blocks, one per
// CTA of a cluster. Groups of kGroupM row blocks walk the columns together (L2 reuse of B).
__device__ __forceinline__ void unit_coords(int unit, int num_m, int num_groups, int& m_blk, int& n_grp) {
  const int per_group = kGroupM * num_groups;
  const int group = unit / per_group;
  const int first_m = group * kGroupM;
  const int size_m = min(num_m - first_m, kGroupM);
  m_blk = first_m + (unit % per_group) % size_m;
  n_grp = (unit % per_group) / size_m;
}

// kWholeRing: every work unit's K blocks are a multiple of the ring depth, so the consumers run
// tile by tile in whole revolutions of the ring (see the consumer loop); the host picks that
// instantiation when K allows it.
template <int BM, int BN, int CLUSTER, bool kWholeRing>
__global__ void __launch_bounds__(Config<BM, BN, CLUSTER>::kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                    const __grid_constant__ CUtensorMap tma_d, const __grid_constant__ CUtensorMap tma_sa,
                    const __grid_constant__ CUtensorMap tma_sb, Params p) {
  using Cfg = Config<BM, BN, CLUSTER>;
  constexpr int kStages = Cfg::kStages, kWaves = Cfg::kWaves;
  constexpr int kConsumers = Cfg::kConsumers, kRowsC = Cfg::kRowsPerConsumer;
  constexpr int NJ = BN / 8;        // 8-column chunks of a wgmma accumulator row
  constexpr int kRowsA = BM / CLUSTER;  // rows of the A tile each CTA of a cluster loads
  constexpr int kSbBoxBytes = (BN > 128 ? 2 : 1) * 16;  // a stage's B-scale box
  using Smem = typename Cfg::Smem;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Aligned by offsetting smem_raw itself (not by integer arithmetic on its address), so the compiler
  // still knows every access through s is to shared memory (LDS / STS, not generic LD / ST).
  Smem& s = *reinterpret_cast<Smem*>(smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
  // Read through a shuffle so the compiler knows it is warp-uniform: the consumers' descriptor
  // arithmetic then stays in uniform registers instead of moving to them before every wgmma.
  const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const int t = threadIdx.x % 128;
  const int rank = CLUSTER > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int cluster_id = blockIdx.x / CLUSTER, num_clusters = gridDim.x / CLUSTER;
  const int num_m = (p.M + BM - 1) / BM, num_n = (p.N + BN - 1) / BN;
  const int num_groups = (num_n + CLUSTER - 1) / CLUSTER, num_units = num_m * num_groups * p.splits;
  const int kblocks = p.K / BK / p.splits, nblocks128 = p.N / 128;  // K blocks per work unit

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);  // the producer's expect-tx arrive (the TMA's bytes complete it)
      mbar_init(&s.empty[i], kConsumers * 4 * CLUSTER);  // lane r of every consumer warp of both CTAs
    }
    for (int i = 0; i < kConsumers; ++i) {  // pair-K: every thread of the peer's consumer i
      mbar_init(&s.pair_full[i], 1);  // the receiver's expect-tx arrive (the copy's bytes complete it)
      mbar_init(&s.pair_free[i], 128);
    }
    prefetch_map(&tma_a);
    prefetch_map(&tma_b);
    prefetch_map(&tma_d);
    prefetch_map(&tma_sa);
    prefetch_map(&tma_sb);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  // Split-K: the reduction kernel is launched as a programmatic dependent (PDL), so it may be
  // scheduled now, onto SMs this grid leaves idle; it waits for this grid's completion itself.
  if (p.splits > 1 && !p.pair_k) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // the peer must not multicast into, or arrive on, barriers that are not initialised yet
  if constexpr (CLUSTER > 1) cluster_sync_relaxed();
  else if (p.pair_k) cluster_sync_relaxed();
  else __syncthreads();

  if (wg == 0) {  // producer
    // three consumers: 128 * 24 + 384 * 160 registers; two: 128 * 40 + 256 * 232 (of 65536)
    setmaxnreg_dec<kConsumers == 3 ? 24 : 40>();
    if (t == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int unit = cluster_id; unit < num_units; unit += num_clusters) {
        int m_blk, n_grp;
        unit_coords(unit / p.splits, num_m, num_groups, m_blk, n_grp);
        const int kb0 = unit % p.splits * kblocks;  // the unit's first K block
        // A box entirely past the tensor is never used (its outputs are not stored): load an
        // in-bounds one instead of relying on a fully out-of-bounds TMA.
        int a_row = m_blk * BM + rank * kRowsA;
        if (a_row >= p.M) a_row = 0;
        int n_blk = n_grp * CLUSTER + rank;
        if (n_blk >= num_n) n_blk = 0;
        // the weight-scale row of the tile's first 128-column block (BN = 192: and the next)
        const int nb0 = min(n_blk * BN / 128, nblocks128 - 1);
        for (int kb = kb0; kb < kb0 + kblocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
          // rows past M / N arrive zero-filled and are still counted
          mbar_expect_tx(&s.full[stage], Cfg::kStageBytes + kSbBoxBytes);
          if constexpr (CLUSTER > 1)
            tma_load_2d_multicast(&tma_a, &s.full[stage], s.a[stage] + rank * kRowsA * BK, kb * BK, a_row,
                                  static_cast<uint16_t>((1 << CLUSTER) - 1));
          else
            tma_load_2d(&tma_a, &s.full[stage], s.a[stage], kb * BK, a_row);
          tma_load_2d(&tma_b, &s.full[stage], s.b[stage], kb * BK, n_blk * BN);
          tma_load_2d(&tma_sa, &s.full[stage], s.sa[stage], m_blk * BM, kb);
          // The TMA's inner coordinate must be 16-byte aligned: the 4 K blocks from kb & ~3 (the
          // consumers pick kb & 3). B's scales could be 4-byte cp.async copies into the ring instead
          // (equal speed), but only the TMA's writes keep racecheck from reporting the ring's reuse.
          tma_load_2d(&tma_sb, &s.full[stage], s.sb[stage], kb & ~3, nb0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      // A CTA may not leave while its peer's consumers can still arrive on its empty barriers (the
      // peer's multicasts into it are done: its own consumers waited for them). Waiting until every
      // stage's last use is released by both CTAs costs no fence. A cluster barrier at the end
      // instead cost every thread a MEMBAR.ALL.GPU, held each CTA for its peer's epilogue and, met
      // by all threads after the role branches, made ptxas compute the producer's TMA coordinates
      // in per-thread registers (R2UR before each TMA load): 2.8-6.3 % slower on an H100
      // (docs/sm90-gemm.md).
      if constexpr (CLUSTER > 1) {
        for (int i = 0; i < kStages; ++i) {
          mbar_wait(&s.empty[stage], phase ^ 1);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {  // consumers
    setmaxnreg_inc<kConsumers == 3 ? 160 : 232>();
    const int c = wg - 1;
    const int warp = t / 32, lane = t % 32;
    const int row_in_wave = warp * 16 + lane / 4;  // and row_in_wave + 8
    int stage = 0;           // next stage to compute on
    uint32_t phase = 0;
    int release_stage = 0;   // next stage to hand back to the producer(s)
    auto release = [&] {     // stage consumed: release it to the producer of every CTA that wrote it
      if constexpr (CLUSTER > 1) {
        if (lane < CLUSTER) mbar_arrive_cluster(&s.empty[release_stage], lane);
      } else if (lane == 0) {
        mbar_arrive(&s.empty[release_stage]);
      }
      if (++release_stage == kStages) release_stage = 0;
    };
    // A stage's scales as one consumer thread uses them: its rows' A scales per wave and the B
    // scales of the tile's one or two 128-column blocks. Read into registers when the stage is
    // acquired, since the stage may be refilled once it is released, before the promotion.
    struct Scales {
      float a[kWaves][2], b[2];
    };
    // The K block of the next acquire (stages are acquired in the producer's order: unit by unit,
    // each unit's K blocks in order) and the end of its unit's, to find the block in its B-scale box.
    int acq_unit = cluster_id, acq_kb = cluster_id % p.splits * kblocks, acq_kb_end = acq_kb + kblocks;
    auto acquire = [&](Scales& sc) {
      mbar_wait(&s.full[stage], phase);
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc.a[w][h] = lds_ordered(&s.sa[stage][c * kRowsC + w * 64 + row_in_wave + 8 * h]);
      const int q = acq_kb & 3;
      sc.b[0] = lds_ordered(&s.sb[stage][q]);
      sc.b[1] = BN > 128 ? lds_ordered(&s.sb[stage][4 + q]) : 0.f;
      if (++acq_kb == acq_kb_end) {
        acq_unit += num_clusters;
        acq_kb = acq_unit % p.splits * kblocks;
        acq_kb_end = acq_kb + kblocks;
      }
    };
    // four wgmma m64nBNk32 of wave w of the acquired stage into `acc` (fresh: scale_d = 0 first)
    // Descriptors of stage 0, advanced by address arithmetic: the address field holds bytes / 16, and
    // every address stays below 2^18 bytes, so adding never carries out of the field.
    const uint64_t desc_a0 = smem_desc(s.a[0] + c * kRowsC * BK), desc_b0 = smem_desc(s.b[0]);
    auto issue = [&](float (&acc)[BN / 2], int w) {
      wgmma_fence();
      const uint64_t da = desc_a0 + static_cast<uint32_t>((stage * BM * BK + w * 64 * BK) / 16);
      const uint64_t db = desc_b0 + static_cast<uint32_t>(stage * BN * BK / 16);
      wgmma_e4m3<BN, false>(acc, da, db);
#pragma unroll
      for (int k = 1; k < BK / 32; ++k) wgmma_e4m3<BN, true>(acc, da + k * 32 / 16, db + k * 32 / 16);
      wgmma_commit();
      if (w == kWaves - 1 && ++stage == kStages) {  // all waves issued: the next acquire waits for the next stage
        stage = 0;
        phase ^= 1;
      }
    };

    // The tile whose K blocks are being promoted: its coordinates, and this thread's share of its
    // bias (loaded from global memory when the tile begins, written to shared memory for the
    // epilogue when it ends, so the load's latency is never waited for).
    constexpr int kBiasRegs = (BN + 127) / 128;
    int unit = cluster_id, row0 = 0, n0 = 0, j_split = NJ;
    float* partial = nullptr;  // split-K: this unit's slice of the workspace
    bool has_nb1 = false;
    float bias_r[kBiasRegs];
    auto begin_tile = [&] {
      int m_blk, n_grp;
      unit_coords(unit / p.splits, num_m, num_groups, m_blk, n_grp);
      row0 = m_blk * BM + c * kRowsC;  // first row of this consumer's part of the tile
      n0 = (n_grp * CLUSTER + rank) * BN;
      // A tile spans one 128-column scale block (BN = 128) or two (BN = 192): chunks j < j_split use
      // the first, the rest the second.
      j_split = (128 - n0 % 128) / 8;
      has_nb1 = BN > 128 && min(n0 / 128, nblocks128 - 1) + 1 < nblocks128;
      // split-K: the reduction adds the bias; pair-K: rank 0, which stores the tile
      const bool adds_bias = p.bias && (p.splits == 1 || (p.pair_k && unit % 2 == 0));
#pragma unroll
      for (int i = 0; i < kBiasRegs; ++i) {
        const int col = n0 + t + 128 * i;
        bias_r[i] = adds_bias && t + 128 * i < BN && col < p.N ? ldg_ordered(p.bias + col) : 0.f;
      }
      if (p.splits > 1 && !p.pair_k) partial = p.ws + static_cast<int64_t>(unit % p.splits) * p.M * p.N;
    };

    float total[kWaves][BN / 2];
#pragma unroll
    for (int w = 0; w < kWaves; ++w)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
    // total[w] += (sa * sb) * acc: the per-128-K promotion into fp32
    auto promote = [&](int w, const float (&acc)[BN / 2], const Scales& sc) {
      const float sb1 = has_nb1 ? sc.b[1] : 0.f;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const float sbj = (BN == 128 || j < j_split) ? sc.b[0] : sb1;
        const float s0 = sc.a[w][0] * sbj, s1 = sc.a[w][1] * sbj;
        total[w][4 * j + 0] = fmaf(s0, acc[4 * j + 0], total[w][4 * j + 0]);
        total[w][4 * j + 1] = fmaf(s0, acc[4 * j + 1], total[w][4 * j + 1]);
        total[w][4 * j + 2] = fmaf(s1, acc[4 * j + 2], total[w][4 * j + 2]);
        total[w][4 * j + 3] = fmaf(s1, acc[4 * j + 3], total[w][4 * j + 3]);
      }
    };
    // Epilogue of the tile: bias and one bf16 rounding of the consumer's whole part into registers,
    // then the bf16 pairs into staging buffers laid out as the TMA store's boxes (64 columns with
    // the 128-byte swizzle, or 32 with the 64-byte one: the swizzle XORs a row's 16-byte chunk
    // index with its address bits 7 and up, so the 8 rows a warp writes at once hit distinct
    // banks), which one thread stores with TMA. The stores run asynchronously while the consumers
    // go on; a buffer is rewritten only after the TMA has read it. Where the staging holds the
    // whole part (kWholePart: 192x128, 128x64) every box is written in one round, then one fence,
    // one barrier and all the part's stores; elsewhere box by box, each reusing a buffer. TMA clips
    // rows past M and columns past N. Then the next tile begins with a zero total.
    constexpr bool kWholePart = Cfg::kStagingBoxes == Cfg::kBoxesPerTile;
    auto epilogue = [&] {
      // fp32 partial straight from the registers, one 4-byte store a value: a 64-bit store of two
      // would tie each pair of totals to an aligned register pair, and the allocator then leaves
      // many promotion FFMAs reading three registers of one bank (tools/sass_ffma_banks.py).
      if (p.splits > 1 && !p.pair_k) {
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row0 + w * 64 + row_in_wave + 8 * h;
            if (r < p.M) {
              float* dst = partial + static_cast<int64_t>(r) * p.N + n0 + 2 * (lane % 4);
#pragma unroll
              for (int j = 0; j < NJ; ++j)
                if (n0 + 8 * j < p.N)
                  dst[8 * j] = total[w][4 * j + 2 * h], dst[8 * j + 1] = total[w][4 * j + 2 * h + 1];
            }
          }
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
        }
        return;
      }
#pragma unroll
      for (int i = 0; i < kBiasRegs; ++i)
        if (t + 128 * i < BN) sts_ordered(&s.bias[c][t + 128 * i], bias_r[i]);
      // The bias barrier also frees the first box (whole part: every box) for all the consumer's
      // threads: the previous tile's stores were issued a tile ago, so this wait rarely waits.
      if (t == 0) bulk_wait_read<kWholePart ? 0 : Cfg::kStagingBoxes - 1>();
      named_barrier_sync(1 + c, 128);  // bias written, first box free
      // The bias and the rounding of the consumer's whole part first, into bf16 pairs: the loads
      // and the math are independent, so the scheduler overlaps their latencies (done box by box,
      // each box's bias load, add, convert and store formed one dependent chain), and the stores
      // below hold half the registers the fp32 totals did.
      uint32_t packed[kWaves][BN / 4];
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const float2 bv = *reinterpret_cast<const float2*>(&s.bias[c][8 * j + 2 * (lane % 4)]);
#pragma unroll
          for (int h = 0; h < 2; ++h)
            packed[w][2 * j + h] = pack_bf16(total[w][4 * j + 2 * h] + bv.x, total[w][4 * j + 2 * h + 1] + bv.y);
        }
      const auto store = [&](int w, int bx, const uint8_t* box) {  // one thread: the box's TMA store
        if (row0 + w * 64 < p.M && n0 + bx * Cfg::kBoxCols < p.N)
          tma_store_2d(&tma_d, box, n0 + bx * Cfg::kBoxCols, row0 + w * 64);
      };
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
#pragma unroll
        for (int bx = 0; bx < BN / Cfg::kBoxCols; ++bx) {
          const int i = w * (BN / Cfg::kBoxCols) + bx;
          uint8_t* box = s.staging[c][i % Cfg::kStagingBoxes];
          if (!kWholePart && i > 0) {
            if (t == 0) bulk_wait_read<Cfg::kStagingBoxes - 1>();
            named_barrier_sync(1 + c, 128);  // box free
          }
#pragma unroll
          for (int jj = 0; jj < Cfg::kBoxCols / 8; ++jj) {  // the box's 16-byte chunks a row
            const int j = bx * (Cfg::kBoxCols / 8) + jj;  // 8-column chunk of the wave
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = row_in_wave + 8 * h;
              const int sw = Cfg::kBoxCols == 64 ? r % 8 : (r >> 1) % 4;
              *reinterpret_cast<uint32_t*>(box + r * (2 * Cfg::kBoxCols) + ((jj ^ sw) * 16) + (lane % 4) * 4) =
                  packed[w][2 * j + h];
            }
          }
          if constexpr (!kWholePart) {
            fence_proxy_async();  // make the generic-proxy writes visible to the TMA (async proxy)
            named_barrier_sync(1 + c, 128);
            if (t == 0) {
              store(w, bx, box);
              bulk_commit();
            }
          }
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
      }
      if constexpr (kWholePart) {
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

    // Pair-K, before the epilogue of the CTA's one work unit (the launcher gives each CTA one).
    // Once a CTA's K loop is done, nothing reads its A rows again (every wgmma waited for, the
    // producer has no more loads). Rank 1 (odd unit: the tile's second K slice) writes its fp32
    // totals into its own A rows of every stage for this consumer, and one thread copies them to
    // the same rows of rank 0 with the bulk copy (TMA), whose bytes complete rank 0's pair_full;
    // rank 1 skips the epilogue but stays until rank 0 has the bytes (its rows are the copy's
    // source). Rank 0 adds them and goes on to its epilogue. Value v of thread t sits at word t
    // of a 512-byte row: 4-byte accesses, conflict-free (a 16-byte access would tie four totals
    // to an aligned register quad, and the promotion FFMAs would read same-bank registers,
    // tools/sass_ffma_banks.py). Returns whether this CTA stores the tile.
    auto pair_exchange = [&]() -> bool {
      if constexpr (!Cfg::kPairFits || CLUSTER > 1) {
        return true;
      } else {
        if (!p.pair_k) return true;
        constexpr int kPerStage = kRowsC * BK / 4 / 128;  // values a thread keeps in one stage's rows
        constexpr int kValues = kWaves * BN / 2;
        static_assert(kValues % kPerStage == 0 && kValues / kPerStage <= kStages, "the part fills whole stages");
        const uint32_t base = smem_addr(s.a[0] + c * kRowsC * BK) + 4 * t;
        const auto offset = [](int v) { return (v / kPerStage) * (BM * BK) + (v % kPerStage) * 512; };
        if (unit % 2 == 0) {
          if (t == 0) mbar_expect_tx(&s.pair_full[c], kRowsC * BN * 4);
          mbar_arrive_cluster_release(&s.pair_free[c], 1);  // phase 0: these rows are free
          mbar_wait(&s.pair_full[c], 0);
          mbar_arrive_cluster_release(&s.pair_free[c], 1);  // phase 1: the copy has read its source
#pragma unroll
          for (int w = 0; w < kWaves; ++w)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) total[w][i] += lds_addr(base + offset(w * (BN / 2) + i));
          return true;
        }
#pragma unroll
        for (int w = 0; w < kWaves; ++w)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) sts_addr(base + offset(w * (BN / 2) + i), total[w][i]);
        fence_proxy_async();  // the generic-proxy writes visible to the bulk copy
        named_barrier_sync(1 + c, 128);
        if (t == 0) {
          mbar_wait_cluster_acquire(&s.pair_free[c], 0);
#pragma unroll
          for (int i = 0; i < kValues / kPerStage; ++i)
            bulk_copy_to_cta(s.a[i] + c * kRowsC * BK, kRowsC * BK, &s.pair_full[c], 0);
          mbar_wait_cluster_acquire(&s.pair_free[c], 1);
        }
        return false;
      }
    };

    // this CTA's units are cluster_id, cluster_id + num_clusters, ...
    const int my_units = cluster_id < num_units ? (num_units - 1 - cluster_id) / num_clusters + 1 : 0;
    if (my_units > 0) begin_tile();
    // While one consumer waits for its wgmma and promotes them, the others' are running, so the
    // promotion FFMAs of one overlap the tensor work of the others. The consumers are not made to
    // take turns (named barriers between their issues, as cuBLAS's blockwise kernels do): with
    // the promotion free of register-bank conflicts, the turns cost up to 5 % (docs/sm90-gemm.md).
    const int stream = my_units * kblocks;
    float acc[BN / 2];
    // The next K block's stage is acquired (its full barrier waited for, its scales read) right
    // after this block's last wave is issued, under its wgmma, instead of between a promotion and
    // the next issue.
    Scales sc, sc_next;
    if constexpr (kWholeRing) {
      // Tile by tile, each tile's K blocks in revolutions of kStages unrolled blocks: a tile's
      // first block is always stage 0, so every copy's stage is a constant (descriptor and barrier
      // addresses fold), and no block counts K blocks or tests the end of the stream. Against the
      // stream loop below, sustained: 192x128 +0.5..+4.6 %, 256x128 -2.3..+4.4 % at eight shapes
      // (docs/sm90-gemm.md, "Whole-ring loop").
      auto block = [&](bool more, bool close_previous) {  // more: a block follows (acquire it ahead)
        sc = sc_next;
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
          issue(acc, w);
          if (w == kWaves - 1 && more) acquire(sc_next);
          if (w == 0 && close_previous) {  // the previous tile's epilogue, under this wave's wgmma
            epilogue();
            unit += num_clusters;
            begin_tile();
          }
          wgmma_wait<0>();
          fence_operands(acc);
          if (w == kWaves - 1) release();
          promote(w, acc, sc);
        }
      };
      if (stream > 0) acquire(sc_next);
      const int revs = kblocks / kStages;
      for (int u = 0; u < my_units; ++u)
        for (int r = 0; r < revs; ++r)
#pragma unroll
          for (int i = 0; i < kStages; ++i) {
            stage = release_stage = i;
            block(i < kStages - 1 || r + 1 < revs || u + 1 < my_units, i == 0 && r == 0 && u > 0);
          }
      if (my_units > 0 && pair_exchange()) epilogue();
    } else if constexpr (BM == 128 && BN <= 128) {
      // 128x128 (one wave a consumer) with two accumulators: block g + 1 is issued before block g
      // is waited for (wgmma.wait_group 1) and promoted, so the tensor cores have this consumer's
      // next block while it promotes. Unrolled by two so each accumulator keeps its registers (a
      // loop-carried accumulator in flight makes ptxas serialize the wgmma). Measured 8-13 %
      // faster at M = 256-1024 (docs/sm90-gemm.md, "Two accumulators at 128x128"). 128x64 runs the
      // same loop: twice the tiles, for small M where 128x128 leaves SMs idle.
      float acc1[BN / 2];
      int kb = 0;  // K block of the current tile
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
        if (++kb == kblocks) {
          kb = 0;
          if (more || pair_exchange()) epilogue();  // `more` is a constant at each call
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
      // Any K: the K blocks of all this CTA's tiles form one stream; a tile's epilogue runs after
      // the next tile's first wave is issued, under its wgmma.
      if (stream > 0) acquire(sc_next);
      bool epilogue_due = false;  // the previous tile is fully promoted but not yet stored
      int kb = 0;                 // K block of the current tile
      auto step = [&](int g) {    // block g of the stream
        sc = sc_next;
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
          issue(acc, w);
          if (w == kWaves - 1 && g + 1 < stream) acquire(sc_next);
          if (w == 0 && epilogue_due) {
            epilogue();
            epilogue_due = false;
            unit += num_clusters;
            begin_tile();  // unit < num_units: this block belongs to it
          }
          wgmma_wait<0>();
          fence_operands(acc);
          if (w == kWaves - 1) release();
          promote(w, acc, sc);
        }
        if (++kb == kblocks) {
          kb = 0;
          epilogue_due = true;
        }
      };
      if constexpr (kWaves == 2) {
        // Two-wave tiles: the loop unrolled by the ring depth. Block g always uses stage
        // g % kStages (the stream starts at stage 0 and takes one stage a block), so in each copy
        // the stage is a constant and the descriptor and barrier addresses fold: 256x128 measured
        // 4-7 % faster sustained than with run-time stage indices, one-wave tiles 0-5 % slower
        // (docs/sm90-gemm.md, "Unrolled ring").
        for (int g0 = 0; g0 < stream; g0 += kStages) {
#pragma unroll
          for (int i = 0; i < kStages; ++i) {
            if (g0 + i >= stream) break;
            stage = release_stage = i;
            step(g0 + i);
          }
        }
      } else {
        for (int g = 0; g < stream; ++g) step(g);
      }
      if (epilogue_due && pair_exchange()) epilogue();
    }
    // Shared memory must outlive the TMA stores that read it; their global writes complete with
    // the grid, so waiting for those as well would only hold the CTA.
    if (t == 0) bulk_wait_read<0>();
  }
}

// Split-K's second pass: d = bf16(sum over slices of ws + bias), four adjacent columns a thread
// (N is a multiple of 128), slices summed in order (deterministic).
__global__ void __launch_bounds__(256) splitk_reduce_kernel(const float* __restrict__ ws, const float* __restrict__ bias,
                                                            __nv_bfloat16* __restrict__ d, int64_t ldd, int M, int N,
                                                            int splits) {
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the GEMM's partials (a no-op without PDL)
  const int64_t quads = static_cast<int64_t>(M) * N / 4, slice = static_cast<int64_t>(M) * N;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < quads;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = q * 4;
    const int m = static_cast<int>(e / N), n = static_cast<int>(e % N);
    float4 acc = bias ? *reinterpret_cast<const float4*>(bias + n) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 sum = *reinterpret_cast<const float4*>(ws + e);
    for (int s = 1; s < splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(ws + s * slice + e);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(d + static_cast<int64_t>(m) * ldd + n);
    out[0] = __floats2bfloat162_rn(sum.x + acc.x, sum.y + acc.y);
    out[1] = __floats2bfloat162_rn(sum.z + acc.z, sum.w + acc.w);
  }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// rows x cols row-major (row stride ld_bytes) in box_rows x box_cols boxes; with the 128-byte
// swizzle a box row is 128 bytes (the swizzle's span).
const char* make_map(CUtensorMap* map, CUtensorMapDataType dtype, const void* ptr, int64_t rows,
                     int64_t cols, int64_t ld_bytes, int box_cols, int box_rows,
                     CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  EncodeTiled enc = encoder();
  if (!enc) return "cuTensorMapEncodeTiled is not available from the driver";
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_bytes)};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem[2] = {1, 1};
  CUresult r = enc(map, dtype, 2, const_cast<void*>(ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected a tensor (alignment or stride)";
}

// Per-device launch facts of one instantiation: the shared-memory opt-in is per device, and so is
// how many clusters fit at once (a persistent grid larger than that would run in two waves).
struct DeviceState {
  bool ready = false;
  int max_ctas = 0;
  int pair_ctas = 0;  // CTAs resident at once as pair-K clusters (one-CTA tiles), 0: none
};

// A launch of `grid` blocks with the one launch attribute `attr` (which must outlive the config).
cudaLaunchConfig_t launch_with(int grid, int threads, int smem, cudaStream_t stream, cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

// A launch of `grid` CTAs in clusters of `cluster` along x; `attr` must outlive the config.
cudaLaunchConfig_t cluster_launch(int grid, int cluster, int threads, int smem, cudaStream_t stream,
                                  cudaLaunchAttribute& attr) {
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return launch_with(grid, threads, smem, stream, attr);
}

template <int BM, int BN, int CLUSTER, bool kWholeRing>
const char* prepare(int dev, int num_sms, int& max_ctas, int* pair_ctas = nullptr) {
  static DeviceState state[64];
  DeviceState& st = state[dev & 63];
  auto kernel = fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>;
  constexpr int smem = Config<BM, BN, CLUSTER>::kSmemBytes;
  if (!st.ready) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
      return "cudaFuncSetAttribute(max dynamic shared memory) failed";
    st.max_ctas = num_sms;
    if constexpr (CLUSTER > 1) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = cluster_launch(num_sms / CLUSTER * CLUSTER, CLUSTER,
                                                    Config<BM, BN, CLUSTER>::kThreads, smem, nullptr, attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1)
        return "cudaOccupancyMaxActiveClusters found no room for a cluster";
      st.max_ctas = clusters * CLUSTER;
    } else if constexpr (Config<BM, BN, CLUSTER>::kPairFits && !kWholeRing) {
      // not every SM pairs with another in its GPC: ask how many 2-CTA clusters fit (the
      // whole-ring instantiation has the same resources; pair_k_ctas() asks this one)
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = cluster_launch(num_sms / 2 * 2, 2, Config<BM, BN, CLUSTER>::kThreads, smem,
                                                    nullptr, attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
        cudaGetLastError();  // no pair-K on this device: the workspace split serves
        clusters = 0;
      }
      st.pair_ctas = 2 * clusters;
    }
    st.ready = true;
  }
  max_ctas = st.max_ctas;
  if (pair_ctas) *pair_ctas = st.pair_ctas;
  return nullptr;
}

// Work units of p in cfg's tiles: output tiles (one a cluster of adjacent tiles) x K slices.
int work_units(const Params& p, const TileConfig& cfg) {
  const int num_n = (p.N + cfg.block_n - 1) / cfg.block_n;
  return ((p.M + cfg.block_m - 1) / cfg.block_m) * ((num_n + cfg.cluster - 1) / cfg.cluster) * p.splits;
}

// Pair-K for two slices of one-CTA tiles whose work units all run at once (one unit a CTA).
bool takes_pair_k(const Params& p, const TileConfig& cfg, int num_sms) {
  return p.splits == 2 && cfg.cluster == 1 && work_units(p, cfg) <= pair_k_ctas(cfg, num_sms);
}

template <int BM, int BN, int CLUSTER, bool kWholeRing>
const char* launch_cfg(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int num_sms,
                       cudaStream_t stream) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
  int max_ctas = 0;
  if (const char* e = prepare<BM, BN, CLUSTER, kWholeRing>(dev, num_sms, max_ctas)) return e;
  CUtensorMap ma, mb, md, msa, msb;
  if (const char* e = make_map(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, p.M, p.K, lda, BK, BM / CLUSTER)) return e;
  if (const char* e = make_map(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, b, p.N, p.K, ldb, BK, BN)) return e;
  if (const char* e = make_map(&md, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.d, p.M, p.N, p.ldd * 2, Config<BM, BN, CLUSTER>::kBoxCols, 64,
                               Config<BM, BN, CLUSTER>::kBoxCols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                       : CU_TENSOR_MAP_SWIZZLE_64B)) return e;
  // A's scales as a [K/128, M] row-major matrix (M-major), one BM-wide box per stage
  if (const char* e = make_map(&msa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sa, p.K / BK, p.M, p.sa_sk * 4, BM, 1,
                               CU_TENSOR_MAP_SWIZZLE_NONE))
    return e;
  // B's scales as a [N/128, K/128] row-major matrix, 4 K blocks by the tile's 1 or 2 rows a box
  const int kbs = p.K / BK, nbs = p.N / 128;
  if ((kbs > 1 && p.sb_sk != 1) || (nbs > 1 && (p.sb_sn % 4 != 0 || p.sb_sn < kbs)) ||
      reinterpret_cast<uintptr_t>(p.sb) % 16 != 0)
    return "sb must have a unit K-block stride, a row stride that is a multiple of 4 (at least K / 128) and a "
           "16-byte aligned base (ltx_kernels/gemm.py copies it so)";
  if (const char* e = make_map(&msb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sb, nbs, kbs, nbs > 1 ? p.sb_sn * 4 : 16, 4,
                               BN > 128 ? 2 : 1, CU_TENSOR_MAP_SWIZZLE_NONE))
    return e;
  if (p.splits < 1 || (p.K / BK) % p.splits != 0) return "splits must divide K / 128";
  const int units = work_units(p, {BM, BN, CLUSTER});
  // Two slices whose units all run at once: pair-K, one unit a CTA (units is even), no workspace
  // and no reduction. Otherwise the slices' partials go through the workspace.
  Params pp = p;
  pp.pair_k = takes_pair_k(p, {BM, BN, CLUSTER}, num_sms);
  if (p.splits > 1 && p.ws == nullptr && !pp.pair_k) return "split-K needs a workspace here (uses_workspace())";
  const int grid = pp.pair_k ? units : (units < max_ctas / CLUSTER ? units : max_ctas / CLUSTER) * CLUSTER;
  if (grid == 0) return nullptr;
  constexpr int smem = Config<BM, BN, CLUSTER>::kSmemBytes, threads = Config<BM, BN, CLUSTER>::kThreads;
  if (pp.pair_k) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch(grid, 2, threads, smem, stream, attr);
    if (cudaLaunchKernelEx(&cfg, fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, msb, pp) != cudaSuccess)
      return "cudaLaunchKernelEx (pair-K cluster launch) failed";
    return nullptr;
  }
  if constexpr (CLUSTER == 1) {
    fp8_gemm_kernel<BM, BN, 1, kWholeRing><<<grid, threads, smem, stream>>>(ma, mb, md, msa, msb, pp);
  } else {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch(grid, CLUSTER, threads, smem, stream, attr);
    if (cudaLaunchKernelEx(&cfg, fp8_gemm_kernel<BM, BN, CLUSTER, kWholeRing>, ma, mb, md, msa, msb, pp) != cudaSuccess)
      return "cudaLaunchKernelEx (cluster launch) failed";
  }
  if (p.splits > 1) {
    const int64_t quads = static_cast<int64_t>(p.M) * p.N / 4;
    const int blocks = static_cast<int>(std::min<int64_t>((quads + 255) / 256, static_cast<int64_t>(num_sms) * 8));
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t rcfg = launch_with(blocks, 256, 0, stream, pdl);
    if (cudaLaunchKernelEx(&rcfg, splitk_reduce_kernel, static_cast<const float*>(p.ws), static_cast<const float*>(p.bias),
                           p.d, p.ldd, p.M, p.N, p.splits) != cudaSuccess)
      return "cudaLaunchKernelEx (split-K reduction) failed";
  }
  return nullptr;
}

// The whole-ring loop where each work unit's K blocks are a multiple of the ring depth. It is
// instantiated for the 4-stage configs (BM = 192, 256), whose ring divides the K-block counts of
// every LTX-2 shape; 128x192 (5 stages) and 128x128 (6; its own two-accumulator loop) keep the
// stream loop.
template <int BM, int BN, int CLUSTER>
const char* launch_any_k(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int num_sms,
                         cudaStream_t stream) {
  if constexpr (BM != 128) {
    if (p.splits >= 1 && (p.K / BK) % (p.splits * Config<BM, BN, CLUSTER>::kStages) == 0)
      return launch_cfg<BM, BN, CLUSTER, true>(p, a, lda, b, ldb, num_sms, stream);
  }
  return launch_cfg<BM, BN, CLUSTER, false>(p, a, lda, b, ldb, num_sms, stream);
}

}  // namespace

namespace {
// The instantiations the host may pick (ltx_kernels/gemm.py chooses among them per shape): calls
// f.template operator()<BM, BN, CLUSTER>() for cfg, or returns `unsupported` for any other cfg.
template <typename R, typename F>
R with_tile(const TileConfig& cfg, R unsupported, F f) {
  switch (cfg.block_m * 10000 + cfg.block_n * 10 + cfg.cluster) {
    case 1280641: return f.template operator()<128, 64, 1>();
    case 1281281: return f.template operator()<128, 128, 1>();
    case 1281282: return f.template operator()<128, 128, 2>();
    case 1281921: return f.template operator()<128, 192, 1>();
    case 1921281: return f.template operator()<192, 128, 1>();
    case 2561281: return f.template operator()<256, 128, 1>();
    case 2561282: return f.template operator()<256, 128, 2>();
    default: return unsupported;
  }
}
}  // namespace

const char* launch(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, const TileConfig& cfg,
                   int num_sms, cudaStream_t stream) {
  return with_tile(cfg,
                   "unsupported tile config: (block_m, block_n, cluster) must be one of (128,64,1), (128,128,1|2), "
                   "(128,192,1), (192,128,1), (256,128,1|2)",
                   [&]<int BM, int BN, int CLUSTER>() { return launch_any_k<BM, BN, CLUSTER>(p, a, lda, b, ldb, num_sms, stream); });
}

int pair_k_ctas(const TileConfig& cfg, int num_sms) {
  return with_tile(cfg, 0, [&]<int BM, int BN, int CLUSTER>() {
    if constexpr (CLUSTER > 1 || !Config<BM, BN, CLUSTER>::kPairFits) {
      return 0;
    } else {
      int dev = 0, max_ctas = 0, pair_ctas = 0;
      if (cudaGetDevice(&dev) != cudaSuccess) return 0;
      return prepare<BM, BN, CLUSTER, false>(dev, num_sms, max_ctas, &pair_ctas) ? 0 : pair_ctas;
    }
  });
}

bool uses_workspace(const Params& p, const TileConfig& cfg, int num_sms) {
  return p.splits > 1 && !takes_pair_k(p, cfg, num_sms);
}

namespace {
// A tile config's Config (its shared memory and ring do not depend on the cluster size).
template <typename F>
int with_config(const TileConfig& cfg, F f) {
  if (cfg.block_m == 256) return f(Config<256, 128, 1>{});
  if (cfg.block_m == 192) return f(Config<192, 128, 1>{});
  if (cfg.block_n == 192) return f(Config<128, 192, 1>{});
  if (cfg.block_n == 64) return f(Config<128, 64, 1>{});
  return f(Config<128, 128, 1>{});
}
}  // namespace

int smem_bytes(const TileConfig& cfg) {
  return with_config(cfg, [](auto c) { return decltype(c)::kSmemBytes; });
}

int stages(const TileConfig& cfg) {
  return with_config(cfg, [](auto c) { return decltype(c)::kStages; });
}

}  // namespace ltx_gemm_sm90
