// Shared by the SM90 GEMM kernel (fp8_gemm_sm90_kernel.cu) and its torch binding (fp8_gemm_sm90.cpp).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ltx_gemm_sm90 {

struct Params {
  const float* sa;  // sa[m + kb * sa_sk]: 1x128 activation scales, M-major (read with TMA: 16-byte
  int64_t sa_sk;    // aligned base, sa_sk a multiple of 4), the layout quantize_blockwise writes
  const float* sb;  // sb[nb * sb_sn + kb * sb_sk]: 128x128 weight scales (read with TMA: 16-byte
  int64_t sb_sn, sb_sk;  // aligned base, sb_sk 1 and sb_sn a multiple of 4 where those blocks exist)
  const float* bias;  // fp32 [N] or nullptr
  __nv_bfloat16* d;   // [M, N], row stride ldd (elements)
  int64_t ldd;
  int M, N, K;
  // Split-K (splits > 1, dividing K / 128): work unit u is K slice u % splits of tile u / splits;
  // each slice's fp32 partial goes to ws[slice][M][N] (row stride N, no bias), and a second kernel
  // sums the slices in order, adds the bias and rounds once to bf16 into d.
  int splits;
  float* ws;
  // Pair-K (set by the launcher, never by the caller): two slices, the two CTAs of a 2-CTA
  // cluster on one tile; rank 1 hands its fp32 partial to rank 0 through distributed shared
  // memory, and rank 0 adds it and runs the usual epilogue. ws is then not touched.
  int pair_k;
};

// Output tile and cluster of one kernel instantiation: (block_m, block_n, cluster) is one of
// (128, 64, 1), (128, 128, 1 or 2), (128, 192, 1), (192, 128, 1), (256, 128, 1 or 2). cluster 2
// pairs horizontally adjacent tiles that share (and multicast) their A tile.
struct TileConfig {
  int block_m, block_n, cluster;
};

// nullptr on success, else why it could not launch. a: [M, K] e4m3 (row stride lda bytes),
// b: [N, K] e4m3 (row stride ldb bytes); N, K multiples of 128; 16-byte aligned bases and strides
// for a, b and d.
const char* launch(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, const TileConfig& cfg,
                   int num_sms, cudaStream_t stream);
int smem_bytes(const TileConfig& cfg);
// CTAs that run at once as pair-K clusters of cfg (one-CTA tiles whose ring holds the peer's
// partial), 0 where cfg has no pair-K; the launcher takes pair-K for two slices when every work
// unit fits at once.
int pair_k_ctas(const TileConfig& cfg, int num_sms);
// Whether launch() needs p.ws for p's split (false where it takes pair-K or does not split).
bool uses_workspace(const Params& p, const TileConfig& cfg, int num_sms);
int stages(const TileConfig& cfg);

}  // namespace ltx_gemm_sm90
