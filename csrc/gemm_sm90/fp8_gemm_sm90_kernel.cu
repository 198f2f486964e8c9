// Blockwise FP8 GEMM for sm_90a: D[M, N] (bf16) = sum_kb sa[m, kb] * sb[n/128, kb] * (A_kb . B_kb^T) + bias.
//
// Persistent and warp-specialized, in the style of DeepGEMM: one CTA per SM walks the output tiles
// (128 x BN with BN = 128 or 192, grouped so neighbouring CTAs share B panels in L2). Warpgroup 0 is
// the producer: one thread issues TMA loads of the A and B tiles (128 x 128 and BN x 128 fp8,
// 128-byte swizzle) into a
// kStages-deep ring of shared-memory stages guarded by "full" / "empty" mbarriers. Warpgroups 1 and
// 2 are consumers, 64 rows each: per 128-wide K block they run four wgmma m64nBNk32 (e4m3 x e4m3,
// fp32 accumulate) into a fresh accumulator, release the stage, and promote it into the fp32 total
// with the block's scales (sa per row, sb per 128 columns), so accumulation never happens in
// reduced precision beyond one 128-K block. Epilogue: fp32 bias, one bf16 rounding, direct stores
// predicated on M and N (TMA zero-fills operand rows past M / N). N and K must be multiples of 128
// (checked on the host, in Python).
#include "fp8_gemm_sm90.h"

#include <cuda_bf16.h>

#include <cstdint>

namespace ltx_gemm_sm90 {
namespace {

constexpr int BM = 128, BK = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kGroupM = 8;

// BN = 128 or 192 output columns per tile. 192 reads 40 KB of operands per 6.3 MFLOP instead of
// 32 KB per 4.2 (less L2->SM traffic per FLOP); its 96 + 96 accumulator registers still fit.
template <int BN>
struct Config {
  static constexpr int kStages = BN == 128 ? 6 : 5;
  struct alignas(1024) Smem {
    uint8_t a[kStages][BM * BK];
    uint8_t b[kStages][BN * BK];
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };
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
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)));
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "LTX_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LTX_WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity));
}

__device__ __forceinline__ void tma_load_2d(const CUtensorMap* map, uint64_t* bar, void* dst, int c_inner, int c_row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c_inner), "r"(c_row), "r"(smem_addr(bar))
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

__device__ __forceinline__ void tile_coords(int tile, int num_m, int num_n, int& m_blk, int& n_blk) {
  const int per_group = kGroupM * num_n;
  const int group = tile / per_group;
  const int first_m = group * kGroupM;
  const int size_m = min(num_m - first_m, kGroupM);
  m_blk = first_m + (tile % per_group) % size_m;
  n_blk = (tile % per_group) / size_m;
}

template <int BN>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, Params p) {
  constexpr int kStages = Config<BN>::kStages;
  constexpr int NJ = BN / 8;  // 8-column chunks of a wgmma accumulator row
  using Smem = typename Config<BN>::Smem;
  extern __shared__ uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int num_m = (p.M + BM - 1) / BM, num_n = (p.N + BN - 1) / BN, num_tiles = num_m * num_n;
  const int kblocks = p.K / BK, nblocks128 = p.N / 128;

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], kConsumers * 4);  // lane 0 of every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (t == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int m_blk, n_blk;
        tile_coords(tile, num_m, num_n, m_blk, n_blk);
        for (int kb = 0; kb < kblocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
          mbar_expect_tx(&s.full[stage], (BM + BN) * BK);  // rows past N arrive zero-filled, still counted
          tma_load_2d(&tma_a, &s.full[stage], s.a[stage], kb * BK, m_blk * BM);
          tma_load_2d(&tma_b, &s.full[stage], s.b[stage], kb * BK, n_blk * BN);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int c = wg - 1;
  const int warp = t / 32, lane = t % 32;
  const int row_in_tile = c * 64 + warp * 16 + lane / 4;
  int stage = 0;
  uint32_t phase = 0;
  float acc[BN / 2];
  float total[BN / 2];
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int m_blk, n_blk;
    tile_coords(tile, num_m, num_n, m_blk, n_blk);
    const int r0 = m_blk * BM + row_in_tile, r1 = r0 + 8;
    const int n0 = n_blk * BN;
    // A tile spans one 128-column scale block (BN = 128) or two (BN = 192): chunks j < j_split use
    // the first, the rest the second.
    const int nb0 = n0 / 128;
    const int j_split = (128 - n0 % 128) / 8;
    const bool has_nb1 = BN > 128 && nb0 + 1 < nblocks128;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) total[i] = 0.f;
    for (int kb = 0; kb < kblocks; ++kb) {
      // scales first: their global loads overlap the wait for the tiles
      const float sa0 = r0 < p.M ? __ldg(p.sa + r0 * p.sa_sm + kb * p.sa_sk) : 0.f;
      const float sa1 = r1 < p.M ? __ldg(p.sa + r1 * p.sa_sm + kb * p.sa_sk) : 0.f;
      const float sb0 = __ldg(p.sb + nb0 * p.sb_sn + kb * p.sb_sk);
      const float sb1 = has_nb1 ? __ldg(p.sb + (nb0 + 1) * p.sb_sn + kb * p.sb_sk) : 0.f;
      mbar_wait(&s.full[stage], phase);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 32; ++k) {
        wgmma_e4m3<BN>(acc, smem_desc(s.a[stage] + c * 64 * BK + k * 32), smem_desc(s.b[stage] + k * 32),
                       k > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait_all();
      if (lane == 0) mbar_arrive(&s.empty[stage]);
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const float sbj = (BN == 128 || j < j_split) ? sb0 : sb1;
        const float s0 = sa0 * sbj, s1 = sa1 * sbj;
        total[4 * j + 0] = fmaf(s0, acc[4 * j + 0], total[4 * j + 0]);
        total[4 * j + 1] = fmaf(s0, acc[4 * j + 1], total[4 * j + 1]);
        total[4 * j + 2] = fmaf(s1, acc[4 * j + 2], total[4 * j + 2]);
        total[4 * j + 3] = fmaf(s1, acc[4 * j + 3], total[4 * j + 3]);
      }
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    // epilogue: fp32 bias, one bf16 rounding; columns past N (BN = 192 tiles) are not stored
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      if (BN > 128 && col >= p.N) continue;
      const float b0 = p.bias ? __ldg(p.bias + col) : 0.f;
      const float b1 = p.bias ? __ldg(p.bias + col + 1) : 0.f;
      if (r0 < p.M)
        *reinterpret_cast<__nv_bfloat162*>(p.d + static_cast<int64_t>(r0) * p.ldd + col) =
            __floats2bfloat162_rn(total[4 * j + 0] + b0, total[4 * j + 1] + b1);
      if (r1 < p.M)
        *reinterpret_cast<__nv_bfloat162*>(p.d + static_cast<int64_t>(r1) * p.ldd + col) =
            __floats2bfloat162_rn(total[4 * j + 2] + b0, total[4 * j + 3] + b1);
    }
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

template <int BN>
int smem_bytes_for() { return static_cast<int>(sizeof(typename Config<BN>::Smem)) + 1024; }

template <int BN>
const char* launch_bn(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int num_sms,
                      cudaStream_t stream) {
  CUtensorMap ma, mb;
  if (const char* e = make_map(&ma, a, p.M, p.K, lda, BM)) return e;
  if (const char* e = make_map(&mb, b, p.N, p.K, ldb, BN)) return e;
  // the shared-memory opt-in is per device: remember it for each one
  static unsigned long long attr_set = 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
  const unsigned long long bit = 1ull << (dev & 63);
  if (!(attr_set & bit)) {
    if (cudaFuncSetAttribute(fp8_gemm_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes_for<BN>()) !=
        cudaSuccess)
      return "cudaFuncSetAttribute(max dynamic shared memory) failed";
    attr_set |= bit;
  }
  const int tiles = ((p.M + BM - 1) / BM) * ((p.N + BN - 1) / BN);
  const int grid = tiles < num_sms ? tiles : num_sms;
  if (grid == 0) return nullptr;
  fp8_gemm_kernel<BN><<<grid, kThreads, smem_bytes_for<BN>(), stream>>>(ma, mb, p);
  return nullptr;
}

}  // namespace

int smem_bytes(int block_n) { return block_n == 192 ? smem_bytes_for<192>() : smem_bytes_for<128>(); }

const char* launch(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int block_n, int num_sms,
                   cudaStream_t stream) {
  if (block_n == 128) return launch_bn<128>(p, a, lda, b, ldb, num_sms, stream);
  if (block_n == 192) return launch_bn<192>(p, a, lda, b, ldb, num_sms, stream);
  return "block_n must be 128 or 192";
}

}  // namespace ltx_gemm_sm90
