// The SM90 GEMM kernel as a plain shared library with a C entry point (no torch), so that kernel
// variants built on any machine with nvcc (tools/sm90_build_standalone.sh, LIB=1) can be timed
// through ctypes in the same process as the built extension, cuBLAS and LTX-2's deep_gemm
// (tools/gemm_protocols.py --lib NAME=PATH, backend lib:NAME@BMxBNxCLUSTER or, with S K slices
// and an fp32 workspace of S * M * N, lib:NAME@BMxBNxCLUSTER/S).
#include "fp8_gemm_sm90_kernel.cu"  // from the -I folder: this checkout's kernel or a variant of it

extern "C" const char* ltx_sm90_launch_splits(const void* a, const void* b, const float* sa, int64_t sa_sk,
                                              const float* sb, int64_t sb_sn, int64_t sb_sk, const float* bias,
                                              void* d, int64_t ldd, int M, int N, int K, int block_m, int block_n,
                                              int cluster, int splits, float* ws, int num_sms, void* stream) {
  ltx_gemm_sm90::Params p{};
  p.sa = sa;
  p.sa_sk = sa_sk;
  p.sb = sb;
  p.sb_sn = sb_sn;
  p.sb_sk = sb_sk;
  p.bias = bias;
  p.d = static_cast<__nv_bfloat16*>(d);
  p.ldd = ldd;
  p.M = M;
  p.N = N;
  p.K = K;
  p.splits = splits;
  p.ws = ws;
  const ltx_gemm_sm90::TileConfig cfg{block_m, block_n, cluster};
  return ltx_gemm_sm90::launch(p, a, K, b, K, cfg, num_sms, static_cast<cudaStream_t>(stream));
}

extern "C" const char* ltx_sm90_launch(const void* a, const void* b, const float* sa, int64_t sa_sk, const float* sb,
                                       int64_t sb_sn, int64_t sb_sk, const float* bias, void* d, int64_t ldd, int M,
                                       int N, int K, int block_m, int block_n, int cluster, int num_sms, void* stream) {
  return ltx_sm90_launch_splits(a, b, sa, sa_sk, sb, sb_sn, sb_sk, bias, d, ldd, M, N, K, block_m, block_n, cluster, 1,
                                nullptr, num_sms, stream);
}
