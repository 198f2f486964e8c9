// Blockwise FP8 GEMM for sm_90a: D[M, N] (bf16) = sum_kb sa[m, kb] * sb[n/128, kb] * (A_kb . B_kb^T) + bias.
//
// Persistent and warp-specialized, in the style of DeepGEMM. One CTA per SM walks output tiles of
// BM x BN (BM = 128 or 256, BN = 128 or 192), grouped so that neighbouring CTAs share B panels in
// L2. Warpgroup 0 is the producer: one thread issues TMA loads of the A and B tiles (128-byte
// swizzle) into a kStages-deep ring guarded by "full" / "empty" mbarriers. With CLUSTER = 2 the two
// CTAs of a cluster take horizontally adjacent tiles (same rows of A): each loads half of the A
// tile and multicasts it to both, which halves the L2 -> SM traffic for A; consumers then release a
// stage to both CTAs' producers. Warpgroups 1 and 2 are consumers with BM/2 rows each, done as
// BM/128 waves of 64 rows: per 128-wide K block a wave runs four wgmma m64nBNk32 (e4m3 x e4m3, fp32
// accumulate) into a fresh accumulator and promotes it into the fp32 total with the block's scales
// (sa per row, sb per 128 columns), so nothing accumulates in the tensor cores' reduced precision
// beyond one 128-K block. While one consumer promotes, the other's wgmma keeps the tensor cores
// busy. Epilogue: fp32 bias, one bf16 rounding, the tile staged through XOR-swizzled shared memory
// (no bank conflicts) and written with 16-byte stores predicated on M and N. TMA zero-fills operand
// rows past M / N. N and K must be multiples of 128 (checked on the host, in Python).
#include "fp8_gemm_sm90.h"

#include <cuda_bf16.h>

#include <cstdint>

namespace ltx_gemm_sm90 {
namespace {

constexpr int BK = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kGroupM = 8;
constexpr int kSmemLimit = 232448;  // sm_90 opt-in maximum per block (227 KB)

template <int BM, int BN, int CLUSTER>
struct Config {
  static_assert(BM == 128 || BM == 256, "BM is 128 or 256");
  static_assert(BN == 128 || (BN == 192 && BM == 128), "BN is 128, or 192 with BM = 128 (registers)");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs");
  static constexpr int kWaves = BM / 128;  // 64-row waves per consumer warpgroup
  static constexpr int kStageBytes = (BM + BN) * BK;
  static constexpr int kStagingBytes = 64 * BN * 2;  // one 64-row bf16 wave per consumer
  static constexpr int kFit = (kSmemLimit - kConsumers * kStagingBytes - 2048) / kStageBytes;
  static constexpr int kStages = kFit < 6 ? kFit : 6;
  struct alignas(1024) Smem {
    uint8_t a[kStages][BM * BK];
    uint8_t b[kStages][BN * BK];
    uint8_t staging[kConsumers][kStagingBytes];
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Smem)) + 1024;  // + slack to align the base
  static_assert(kStages >= 3 && kSmemBytes <= kSmemLimit, "tile does not fit in shared memory");
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

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
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
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b,
                                                      int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

template <int BN>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (BN == 128) wgmma_m64n128k32_e4m3(d, desc_a, desc_b, scale_d);
  else wgmma_m64n192k32_e4m3(d, desc_a, desc_b, scale_d);
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

template <int BM, int BN, int CLUSTER>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, Params p) {
  using Cfg = Config<BM, BN, CLUSTER>;
  constexpr int kStages = Cfg::kStages, kWaves = Cfg::kWaves;
  constexpr int NJ = BN / 8;        // 8-column chunks of a wgmma accumulator row
  constexpr int kRowsA = BM / CLUSTER;  // rows of the A tile each CTA of a cluster loads
  using Smem = typename Cfg::Smem;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int rank = CLUSTER > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int cluster_id = blockIdx.x / CLUSTER, num_clusters = gridDim.x / CLUSTER;
  const int num_m = (p.M + BM - 1) / BM, num_n = (p.N + BN - 1) / BN;
  const int num_groups = (num_n + CLUSTER - 1) / CLUSTER, num_units = num_m * num_groups;
  const int kblocks = p.K / BK, nblocks128 = p.N / 128;

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], kConsumers * 4 * CLUSTER);  // lane r of every consumer warp of both CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  // the peer must not multicast into, or arrive on, barriers that are not initialised yet
  if constexpr (CLUSTER > 1) cluster_sync();
  else __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (t == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int unit = cluster_id; unit < num_units; unit += num_clusters) {
        int m_blk, n_grp;
        unit_coords(unit, num_m, num_groups, m_blk, n_grp);
        // A box entirely past the tensor is never used (its outputs are not stored): load an
        // in-bounds one instead of relying on a fully out-of-bounds TMA.
        int a_row = m_blk * BM + rank * kRowsA;
        if (a_row >= p.M) a_row = 0;
        int n_blk = n_grp * CLUSTER + rank;
        if (n_blk >= num_n) n_blk = 0;
        for (int kb = 0; kb < kblocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
          mbar_expect_tx(&s.full[stage], (BM + BN) * BK);  // rows past M / N arrive zero-filled, still counted
          if constexpr (CLUSTER > 1)
            tma_load_2d_multicast(&tma_a, &s.full[stage], s.a[stage] + rank * kRowsA * BK, kb * BK, a_row,
                                  static_cast<uint16_t>((1 << CLUSTER) - 1));
          else
            tma_load_2d(&tma_a, &s.full[stage], s.a[stage], kb * BK, a_row);
          tma_load_2d(&tma_b, &s.full[stage], s.b[stage], kb * BK, n_blk * BN);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int c = wg - 1;
    const int warp = t / 32, lane = t % 32;
    const int row_in_wave = warp * 16 + lane / 4;  // and row_in_wave + 8
    uint8_t* staging = s.staging[c];
    int stage = 0;
    uint32_t phase = 0;
    float acc[BN / 2];
    float total[kWaves][BN / 2];
    for (int unit = cluster_id; unit < num_units; unit += num_clusters) {
      int m_blk, n_grp;
      unit_coords(unit, num_m, num_groups, m_blk, n_grp);
      const int n_blk = n_grp * CLUSTER + rank;
      const int row0 = m_blk * BM + c * (BM / 2);  // first row of this consumer's part of the tile
      const int n0 = n_blk * BN;
      // A tile spans one 128-column scale block (BN = 128) or two (BN = 192): chunks j < j_split use
      // the first, the rest the second.
      const int nb0 = min(n0 / 128, nblocks128 - 1);
      const int j_split = (128 - n0 % 128) / 8;
      const bool has_nb1 = BN > 128 && nb0 + 1 < nblocks128;
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[w][i] = 0.f;
      // Scales are prefetched one k-block ahead: an L2 round trip is longer than one k-block's
      // wgmma. Rows past M read row M-1's scales (their outputs are never stored).
      const float* sa_row[kWaves][2];
#pragma unroll
      for (int w = 0; w < kWaves; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          sa_row[w][h] = p.sa + static_cast<int64_t>(min(row0 + w * 64 + row_in_wave + 8 * h, p.M - 1)) * p.sa_sm;
      const float* sb_row0 = p.sb + nb0 * p.sb_sn;
      const float* sb_row1 = p.sb + (has_nb1 ? nb0 + 1 : nb0) * p.sb_sn;
      // Two register sets, used alternately (the k-loop is unrolled by two), so that a set is
      // reloaded only after its last use: with one set and a copy, the compiler placed the copy
      // (which waits for the load) right after the first wgmma of the block.
      float sa_x[kWaves][2], sa_y[kWaves][2], sb0_x, sb1_x, sb0_y, sb1_y;
      auto load_scales = [&](int kb, float (&sa_o)[kWaves][2], float& sb0_o, float& sb1_o) {
#pragma unroll
        for (int w = 0; w < kWaves; ++w)
#pragma unroll
          for (int h = 0; h < 2; ++h) sa_o[w][h] = ldg_ordered(sa_row[w][h] + kb * p.sa_sk);
        sb0_o = ldg_ordered(sb_row0 + kb * p.sb_sk);
        sb1_o = BN > 128 ? ldg_ordered(sb_row1 + kb * p.sb_sk) : 0.f;
      };
      auto k_block = [&](int kb, const float (&sa)[kWaves][2], float sb0, float sb1) {
        if (!has_nb1) sb1 = 0.f;
        mbar_wait(&s.full[stage], phase);
#pragma unroll
        for (int w = 0; w < kWaves; ++w) {
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < BK / 32; ++k)
            wgmma_e4m3<BN>(acc, smem_desc(s.a[stage] + (c * (BM / 2) + w * 64) * BK + k * 32),
                           smem_desc(s.b[stage] + k * 32), k > 0 ? 1 : 0);
          wgmma_commit();
          wgmma_wait_all();
          if (w == kWaves - 1) {  // stage consumed: release it to the producer of every CTA that wrote it
            if constexpr (CLUSTER > 1) {
              if (lane < CLUSTER) mbar_arrive_cluster(&s.empty[stage], lane);
            } else if (lane == 0) {
              mbar_arrive(&s.empty[stage]);
            }
          }
#ifndef LTX_SM90_TIMING_NO_PROMOTE  // timing experiments only (bench/sm90_standalone.cu), never in a build
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            const float sbj = (BN == 128 || j < j_split) ? sb0 : sb1;
            const float s0 = sa[w][0] * sbj, s1 = sa[w][1] * sbj;
            total[w][4 * j + 0] = fmaf(s0, acc[4 * j + 0], total[w][4 * j + 0]);
            total[w][4 * j + 1] = fmaf(s0, acc[4 * j + 1], total[w][4 * j + 1]);
            total[w][4 * j + 2] = fmaf(s1, acc[4 * j + 2], total[w][4 * j + 2]);
            total[w][4 * j + 3] = fmaf(s1, acc[4 * j + 3], total[w][4 * j + 3]);
          }
#else
          if (kb == kblocks - 1)
            for (int i = 0; i < BN / 2; ++i) total[w][i] = acc[i] * sa[w][i % 4 / 2] * sb0 * sb1;
#endif
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      };
      load_scales(0, sa_x, sb0_x, sb1_x);
      for (int kb = 0; kb < kblocks; kb += 2) {
        if (kb + 1 < kblocks) load_scales(kb + 1, sa_y, sb0_y, sb1_y);
        k_block(kb, sa_x, sb0_x, sb1_x);
        if (kb + 1 < kblocks) {
          if (kb + 2 < kblocks) load_scales(kb + 2, sa_x, sb0_x, sb1_x);
          k_block(kb + 1, sa_y, sb0_y, sb1_y);
        }
      }
      // Epilogue, per wave: bias and one bf16 rounding into the staging tile (16-byte chunk ch of
      // row r at chunk ch ^ (r % 8): the 8 rows a warp writes at once hit distinct banks), then
      // 16-byte coalesced stores of whole rows.
#ifdef LTX_SM90_TIMING_NO_EPILOGUE
      if (total[0][0] == 12345.f) p.d[t] = __float2bfloat16(total[kWaves - 1][BN / 2 - 1]);
      continue;
#endif
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
        named_barrier_sync(1 + c, 128);  // the previous wave's stores have read the staging tile
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int col = n0 + 8 * j + 2 * (lane % 4);
          float2 bv = make_float2(0.f, 0.f);  // two scalar loads: bias may be a view with any 4-byte offset
          if (p.bias && col < p.N) bv = make_float2(__ldg(p.bias + col), __ldg(p.bias + col + 1));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row_in_wave + 8 * h;
            const __nv_bfloat162 v =
                __floats2bfloat162_rn(total[w][4 * j + 2 * h] + bv.x, total[w][4 * j + 2 * h + 1] + bv.y);
            *reinterpret_cast<__nv_bfloat162*>(staging + r * (BN * 2) + ((j ^ (r % 8)) * 16) + (lane % 4) * 4) = v;
          }
        }
        named_barrier_sync(1 + c, 128);
#pragma unroll
        for (int i = 0; i < 64 * NJ / 128; ++i) {
          const int idx = i * 128 + t;
          const int r = idx / NJ, ch = idx % NJ;
          const int grow = row0 + w * 64 + r, gcol = n0 + ch * 8;
          if (grow < p.M && gcol < p.N)
            *reinterpret_cast<uint4*>(p.d + static_cast<int64_t>(grow) * p.ldd + gcol) =
                *reinterpret_cast<const uint4*>(staging + r * (BN * 2) + ((ch ^ (r % 8)) * 16));
        }
      }
    }
  }
  // no CTA may leave while its peer can still multicast into it or arrive on its barriers
  if constexpr (CLUSTER > 1) cluster_sync();
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

// rows x cols (bytes, fp8) row-major with row stride ld bytes, box_rows x 128 boxes, 128B swizzle.
const char* make_map(CUtensorMap* map, const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  EncodeTiled enc = encoder();
  if (!enc) return "cuTensorMapEncodeTiled is not available from the driver";
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  cuuint32_t box[2] = {BK, static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem[2] = {1, 1};
  CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box, elem,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected the operand (alignment or stride)";
}

// Per-device launch facts of one instantiation: the shared-memory opt-in is per device, and so is
// how many clusters fit at once (a persistent grid larger than that would run in two waves).
struct DeviceState {
  bool ready = false;
  int max_ctas = 0;
};

// A launch of `grid` CTAs in clusters of `cluster` along x; `attr` must outlive the config.
cudaLaunchConfig_t cluster_launch(int grid, int cluster, int smem, cudaStream_t stream, cudaLaunchAttribute& attr) {
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

template <int BM, int BN, int CLUSTER>
const char* prepare(int dev, int num_sms, int& max_ctas) {
  static DeviceState state[64];
  DeviceState& st = state[dev & 63];
  auto kernel = fp8_gemm_kernel<BM, BN, CLUSTER>;
  constexpr int smem = Config<BM, BN, CLUSTER>::kSmemBytes;
  if (!st.ready) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
      return "cudaFuncSetAttribute(max dynamic shared memory) failed";
    st.max_ctas = num_sms;
    if constexpr (CLUSTER > 1) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = cluster_launch(num_sms / CLUSTER * CLUSTER, CLUSTER, smem, nullptr, attr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1)
        return "cudaOccupancyMaxActiveClusters found no room for a cluster";
      st.max_ctas = clusters * CLUSTER;
    }
    st.ready = true;
  }
  max_ctas = st.max_ctas;
  return nullptr;
}

template <int BM, int BN, int CLUSTER>
const char* launch_cfg(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int num_sms,
                       cudaStream_t stream) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
  int max_ctas = 0;
  if (const char* e = prepare<BM, BN, CLUSTER>(dev, num_sms, max_ctas)) return e;
  CUtensorMap ma, mb;
  if (const char* e = make_map(&ma, a, p.M, p.K, lda, BM / CLUSTER)) return e;
  if (const char* e = make_map(&mb, b, p.N, p.K, ldb, BN)) return e;
  const int num_n = (p.N + BN - 1) / BN;
  const int units = ((p.M + BM - 1) / BM) * ((num_n + CLUSTER - 1) / CLUSTER);
  const int grid = (units < max_ctas / CLUSTER ? units : max_ctas / CLUSTER) * CLUSTER;
  if (grid == 0) return nullptr;
  constexpr int smem = Config<BM, BN, CLUSTER>::kSmemBytes;
  if constexpr (CLUSTER == 1) {
    fp8_gemm_kernel<BM, BN, 1><<<grid, kThreads, smem, stream>>>(ma, mb, p);
  } else {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch(grid, CLUSTER, smem, stream, attr);
    if (cudaLaunchKernelEx(&cfg, fp8_gemm_kernel<BM, BN, CLUSTER>, ma, mb, p) != cudaSuccess)
      return "cudaLaunchKernelEx (cluster launch) failed";
  }
  return nullptr;
}

}  // namespace

// The instantiations the host may pick (ltx_kernels/gemm.py chooses among them per shape).
const char* launch(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, const TileConfig& cfg,
                   int num_sms, cudaStream_t stream) {
  const int key = cfg.block_m * 10000 + cfg.block_n * 10 + cfg.cluster;
  switch (key) {
    case 1281281: return launch_cfg<128, 128, 1>(p, a, lda, b, ldb, num_sms, stream);
    case 1281282: return launch_cfg<128, 128, 2>(p, a, lda, b, ldb, num_sms, stream);
    case 1281921: return launch_cfg<128, 192, 1>(p, a, lda, b, ldb, num_sms, stream);
    case 2561281: return launch_cfg<256, 128, 1>(p, a, lda, b, ldb, num_sms, stream);
    case 2561282: return launch_cfg<256, 128, 2>(p, a, lda, b, ldb, num_sms, stream);
    default: return "unsupported tile config: (block_m, block_n, cluster) must be one of (128,128,1|2), (128,192,1), (256,128,1|2)";
  }
}

int smem_bytes(const TileConfig& cfg) {
  if (cfg.block_m == 256) return Config<256, 128, 1>::kSmemBytes;
  if (cfg.block_n == 192) return Config<128, 192, 1>::kSmemBytes;
  return Config<128, 128, 1>::kSmemBytes;
}

int stages(const TileConfig& cfg) {
  if (cfg.block_m == 256) return Config<256, 128, 1>::kStages;
  if (cfg.block_n == 192) return Config<128, 192, 1>::kStages;
  return Config<128, 128, 1>::kStages;
}

}  // namespace ltx_gemm_sm90
