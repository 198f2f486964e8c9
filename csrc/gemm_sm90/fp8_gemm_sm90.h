// Shared by the SM90 GEMM kernel (fp8_gemm_sm90_kernel.cu) and its torch binding (fp8_gemm_sm90.cpp).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ltx_gemm_sm90 {

struct Params {
  const float* sa;  // sa[m * sa_sm + kb * sa_sk]: 1x128 activation scales
  int64_t sa_sm, sa_sk;
  const float* sb;  // sb[nb * sb_sn + kb * sb_sk]: 128x128 weight scales
  int64_t sb_sn, sb_sk;
  const float* bias;  // fp32 [N] or nullptr
  __nv_bfloat16* d;   // [M, N], row stride ldd (elements)
  int64_t ldd;
  int M, N, K;
};

// nullptr on success, else why it could not launch. a: [M, K] e4m3 (row stride lda bytes),
// b: [N, K] e4m3 (row stride ldb bytes); N, K multiples of 128; 16-byte aligned bases and strides;
// block_n (output columns per tile) 128 or 192.
const char* launch(const Params& p, const void* a, int64_t lda, const void* b, int64_t ldb, int block_n, int num_sms,
                   cudaStream_t stream);
int smem_bytes(int block_n);

}  // namespace ltx_gemm_sm90
