// Standalone timing of the SM90 GEMM kernel (no torch): built with nvcc alone, so that variants
// can be compiled on a CPU machine and timed on the GPU in one call. Random e4m3 operands, unit
// scales, CUDA-event medians.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -I csrc/gemm_sm90 [-DLTX_SM90_TIMING_NO_PROMOTE]
//        [-DLTX_SM90_TIMING_NO_EPILOGUE] bench/sm90_standalone.cu -o sm90_standalone
//   ./sm90_standalone M N K BM BN CLUSTER [reps]
#include "../csrc/gemm_sm90/fp8_gemm_sm90_kernel.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void fill_e4m3(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = (uint32_t(i) * 2654435761u) ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = uint8_t(h & 0xBF);  // exponent bit 6 cleared: no NaN, magnitudes up to 2^0..
  }
}

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s M N K BM BN CLUSTER [reps]\n", argv[0]);
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  const ltx_gemm_sm90::TileConfig cfg{std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6])};
  const int reps = argc > 7 ? std::atoi(argv[7]) : 30;
  uint8_t *a, *b;
  float *sa, *sb;
  __nv_bfloat16* d;
  CHECK(cudaMalloc(&a, size_t(M) * K));
  CHECK(cudaMalloc(&b, size_t(N) * K));
  CHECK(cudaMalloc(&sa, size_t(M) * (K / 128) * 4));
  CHECK(cudaMalloc(&sb, size_t(N / 128) * (K / 128) * 4));
  CHECK(cudaMalloc(&d, size_t(M) * N * 2));
  fill_e4m3<<<1024, 256>>>(a, size_t(M) * K, 1);
  fill_e4m3<<<1024, 256>>>(b, size_t(N) * K, 2);
  std::vector<float> ones(std::max(size_t(M) * (K / 128), size_t(N / 128) * (K / 128)), 1.f);
  CHECK(cudaMemcpy(sa, ones.data(), size_t(M) * (K / 128) * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sb, ones.data(), size_t(N / 128) * (K / 128) * 4, cudaMemcpyHostToDevice));
  ltx_gemm_sm90::Params p{};
  p.sa = sa;
  p.sa_sm = 1;
  p.sa_sk = M;
  p.sb = sb;
  p.sb_sn = K / 128;
  p.sb_sk = 1;
  p.bias = nullptr;
  p.d = d;
  p.ldd = N;
  p.M = M;
  p.N = N;
  p.K = K;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto run = [&] {
    const char* e = ltx_gemm_sm90::launch(p, a, K, b, K, cfg, sms, 0);
    if (e) {
      std::fprintf(stderr, "launch: %s\n", e);
      std::exit(1);
    }
  };
  for (int i = 0; i < 5; ++i) run();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(e0));
    run();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double med = ms[reps / 2];
  std::printf("%dx%dx%d tile %dx%dx%d: %.1f us, %.0f TFLOP/s\n", M, N, K, cfg.block_m, cfg.block_n, cfg.cluster,
              med * 1e3, 2.0 * M * N * K / (med * 1e-3) / 1e12);
  return 0;
}
