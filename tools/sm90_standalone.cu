// Standalone timing of the SM90 GEMM kernel (no torch): built with nvcc alone, so that kernel
// sources (this checkout's or another's) can be compiled on a CPU machine and timed on the GPU in
// one go. Random e4m3 operands, non-trivial scales and bias; the first run is checked (every
// output written, nothing past M, 512 sampled outputs against a host reference); CUDA-event
// medians, and the median SM clock NVML reported right after each timed run.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -I csrc/gemm_sm90 tools/sm90_standalone.cu -o sm90_standalone
//   [LTX_SM90_DATA=full] [LTX_SM90_SUSTAIN_MS=2000] [LTX_SM90_CHECK=0] ./sm90_standalone M N K BM BN CLUSTER [reps]
// LTX_SM90_CHECK=0 skips the check, for kernel builds that compute wrong results on purpose.
// Built with -DLTX_SM90_STAMPS over the stamps variant, it also prints the CTAs' start / end spread
// (LTX_SM90_STAMPS_CSV=FILE: every CTA's SM, start, end and cycles).
#include "sm90_lib.cu"  // the C entry point, over the kernel of the -I folder (this or another checkout)

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// mask 0xBF clears exponent bit 6 (|v| < 2, no NaN); 0xFF keeps every code but NaN (up to 448,
// as quantized activations are: more toggling bits, more power)
__global__ void fill_e4m3(uint8_t* p, size_t n, uint32_t seed, uint32_t mask) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = (uint32_t(i) * 2654435761u) ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    uint8_t v = uint8_t(h & mask);
    if ((v & 0x7F) == 0x7F) v ^= 1;  // NaN -> 448
    p[i] = v;
  }
}

static float e4m3_value(uint8_t v) {
  const int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
  const float mag = e == 0 ? std::ldexp(m / 8.f, -6) : std::ldexp(1.f + m / 8.f, e - 7);
  return sign ? -mag : mag;
}

// The SM clock in MHz as NVML reports it (libnvidia-ml is opened at run time: no link-time
// dependency); 0 when NVML is not available.
struct SmClock {
  using Init = int (*)();
  using ByBus = int (*)(const char*, void**);
  using Clock = int (*)(void*, int, unsigned*);
  Clock clock = nullptr;
  void* dev = nullptr;
  SmClock() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) return;
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    char bus[32] = {};
    if (!init || !by_bus || !clock || init() != 0 || cudaDeviceGetPCIBusId(bus, sizeof(bus), 0) != cudaSuccess ||
        by_bus(bus, &dev) != 0)
      clock = nullptr;
  }
  float mhz() const {
    unsigned v = 0;
    return clock && clock(dev, /*NVML_CLOCK_SM*/ 1, &v) == 0 ? float(v) : 0.f;
  }
};

static float bf16_value(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#ifdef LTX_SM90_STAMPS
// One more launch with the stamps variant's per-CTA records (tools/sm90_kernel_variant.py stamps):
// how the CTAs' starts and ends spread across the SMs, against the launch's own span.
template <typename Run>
void print_cta_stamps(Run run) {
  using ltx_gemm_sm90::g_cta_stamps;
  using ltx_gemm_sm90::kStampCtas;
  std::vector<unsigned long long> st(5 * kStampCtas, 0);
  CHECK(cudaMemcpyToSymbol(g_cta_stamps, st.data(), st.size() * 8));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventRecord(e0));
  run();
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CHECK(cudaMemcpyFromSymbol(st.data(), g_cta_stamps, st.size() * 8));
  // Times relative to the earliest start, taken in integers: the timer's absolute values (about
  // 1.8e18 ns) are 256 ns apart as doubles.
  unsigned long long first = ~0ull;
  for (int c = 0; c < kStampCtas && st[5 * c] != 0; ++c) first = std::min(first, st[5 * c]);
  std::vector<double> start, end, ns, cycles;
  for (int c = 0; c < kStampCtas && st[5 * c] != 0; ++c) {
    start.push_back(double(st[5 * c] - first));
    end.push_back(double(st[5 * c + 1] - first));
    ns.push_back(double(st[5 * c + 1] - st[5 * c]));
    cycles.push_back(double(st[5 * c + 3] - st[5 * c + 2]));
  }
  const int n = int(start.size());
  if (n == 0) {
    std::printf("stamps: no CTA recorded (not the stamps variant?)\n");
    return;
  }
  int last = 0;  // the CTA that ended last
  for (int c = 1; c < n; ++c)
    if (end[c] > end[last]) last = c;
  const double t1 = end[last];  // the first start is 0
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
  };
  std::vector<double> end_off(n);
  for (int c = 0; c < n; ++c) end_off[c] = t1 - end[c];
  std::printf("stamps: %d CTAs, event %.2f us, first start to last end %.2f us\n", n, ms * 1e3, t1 * 1e-3);
  std::printf("stamps: start after the first, ns: median %.0f, p90 %.0f, max %.0f\n", pct(start, 0.5),
              pct(start, 0.9), pct(start, 1.0));
  std::printf("stamps: end before the last, ns: median %.0f, p90 %.0f, max %.0f\n", pct(end_off, 0.5),
              pct(end_off, 0.9), pct(end_off, 1.0));
  std::printf("stamps: CTA duration, ns: min %.0f, median %.0f, max %.0f; cycles: min %.0f, median %.0f, max %.0f\n",
              pct(ns, 0.0), pct(ns, 0.5), pct(ns, 1.0), pct(cycles, 0.0), pct(cycles, 0.5), pct(cycles, 1.0));
  std::printf("stamps: the last to end: CTA %d on SM %llu, started %.0f ns after the first, ran %.0f ns (%.0f cycles)\n",
              last, st[5 * last + 4], start[last], ns[last], cycles[last]);
  if (const char* path = std::getenv("LTX_SM90_STAMPS_CSV")) {  // one row a CTA, for a closer look
    if (FILE* f = std::fopen(path, "w")) {
      std::fprintf(f, "cta,sm,start_ns,end_ns,cycles\n");
      for (int c = 0; c < n; ++c)
        std::fprintf(f, "%d,%llu,%.0f,%.0f,%.0f\n", c, st[5 * c + 4], start[c], end[c], cycles[c]);
      std::fclose(f);
    }
  }
}
#endif

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s M N K BM BN CLUSTER [reps]\n", argv[0]);
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  const ltx_gemm_sm90::TileConfig cfg{std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6])};
  const int reps = argc > 7 ? std::atoi(argv[7]) : 30;
  const int KB = K / 128, NB = N / 128, kPad = 64;  // kPad poisoned rows after D catch stores past M
  const int M4 = (M + 3) / 4 * 4;                    // sa's K-block stride, as quantize_blockwise pads it
  uint8_t *a, *b;
  float *sa, *sb, *bias;
  __nv_bfloat16* d;
  CHECK(cudaMalloc(&a, size_t(M) * K));
  CHECK(cudaMalloc(&b, size_t(N) * K));
  CHECK(cudaMalloc(&sa, size_t(M4) * KB * 4));
  CHECK(cudaMalloc(&sb, size_t(NB) * KB * 4));
  CHECK(cudaMalloc(&bias, size_t(N) * 4));
  CHECK(cudaMalloc(&d, size_t(M + kPad) * N * 2));
  const char* data = std::getenv("LTX_SM90_DATA");  // "full": every e4m3 code but NaN
  const uint32_t mask = data && std::strcmp(data, "full") == 0 ? 0xFF : 0xBF;
  fill_e4m3<<<1024, 256>>>(a, size_t(M) * K, 1, mask);
  fill_e4m3<<<1024, 256>>>(b, size_t(N) * K, 2, mask);
  // non-trivial scales (sa M-major, as quantize_blockwise writes it) and bias
  std::vector<float> h_sa(size_t(M4) * KB), h_sb(size_t(NB) * KB), h_bias(N);
  for (int m = 0; m < M; ++m)
    for (int kb = 0; kb < KB; ++kb) h_sa[size_t(kb) * M4 + m] = 0.5f + ((m * 7 + kb * 3) % 5) * 0.25f;
  for (int nb = 0; nb < NB; ++nb)
    for (int kb = 0; kb < KB; ++kb) h_sb[size_t(nb) * KB + kb] = 0.25f + ((nb + kb) % 4) * 0.25f;
  for (int n = 0; n < N; ++n) h_bias[n] = float(n % 7) - 3.f;
  CHECK(cudaMemcpy(sa, h_sa.data(), h_sa.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sb, h_sb.data(), h_sb.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bias, h_bias.data(), h_bias.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d, 0xFF, size_t(M + kPad) * N * 2));  // bf16 NaN: unwritten outputs show up
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto run = [&] {
    const char* e = ltx_sm90_launch(a, b, sa, M4, sb, KB, 1, bias, d, N, M, N, K, cfg.block_m, cfg.block_n, cfg.cluster,
                                    sms, nullptr);
    if (e) {
      std::fprintf(stderr, "launch: %s\n", e);
      std::exit(1);
    }
  };
  run();
  CHECK(cudaDeviceSynchronize());
  // check: every output written, nothing past M, sampled outputs against a host reference
  const char* verdict = "ok";
  const char* check_env = std::getenv("LTX_SM90_CHECK");
  if (!check_env || std::strcmp(check_env, "0") != 0) {
    std::vector<uint16_t> h_d(size_t(M + kPad) * N);
    std::vector<uint8_t> h_a(size_t(M) * K), h_b(size_t(N) * K);
    CHECK(cudaMemcpy(h_d.data(), d, h_d.size() * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h_a.data(), a, h_a.size(), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h_b.data(), b, h_b.size(), cudaMemcpyDeviceToHost));
    size_t unwritten = 0, past_m = 0;
    for (size_t i = 0; i < size_t(M) * N; ++i) unwritten += h_d[i] == 0xFFFF;
    for (size_t i = size_t(M) * N; i < h_d.size(); ++i) past_m += h_d[i] != 0xFFFF;
    double err2 = 0, ref2 = 0;
    const int kSamples = 512;
    for (int i = 0; i < kSamples; ++i) {
      const int m = i < 16 ? std::max(0, M - 1 - i % 4) : int((uint64_t(i) * 2654435761u) % M);
      const int n = i < 16 ? std::max(0, N - 1 - i / 4) : int((uint64_t(i) * 40503u + 17) % N);
      double ref = h_bias[n];
      for (int kb = 0; kb < KB; ++kb) {
        double blk = 0;
        for (int k = kb * 128; k < kb * 128 + 128; ++k)
          blk += double(e4m3_value(h_a[size_t(m) * K + k])) * e4m3_value(h_b[size_t(n) * K + k]);
        ref += blk * h_sa[size_t(kb) * M4 + m] * h_sb[size_t(n / 128) * KB + kb];
      }
      const double got = bf16_value(h_d[size_t(m) * N + n]);
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
    const double rel = std::sqrt(err2 / ref2);  // the GPU tests' measure: ||d - ref|| / ||ref||
    if (unwritten || past_m || !(rel < 3e-3)) verdict = "WRONG";
    std::printf("check %s: %zu unwritten, %zu written past M, rel err %.2e\n", verdict, unwritten, past_m, rel);
  }
  for (int i = 0; i < 4; ++i) run();
  CHECK(cudaDeviceSynchronize());
  // LTX_SM90_SUSTAIN_MS: launch back to back for that long first, so that the timed runs see the
  // clocks the power limit settles at, not the boost clock of a cool GPU
  const char* sustain_env = std::getenv("LTX_SM90_SUSTAIN_MS");
  const double sustain_ms = sustain_env ? std::atof(sustain_env) : 0.0;
  if (sustain_ms > 0) {
    cudaEvent_t s0, s1;
    CHECK(cudaEventCreate(&s0));
    CHECK(cudaEventCreate(&s1));
    float spent = 0.f;
    while (spent < sustain_ms) {
      CHECK(cudaEventRecord(s0));
      for (int i = 0; i < 20; ++i) run();
      CHECK(cudaEventRecord(s1));
      CHECK(cudaEventSynchronize(s1));
      float ms1 = 0.f;
      CHECK(cudaEventElapsedTime(&ms1, s0, s1));
      spent += ms1;
    }
  }
  const SmClock sm_clock;
  std::vector<float> ms(reps), mhz(reps, 0.f);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(e0));
    run();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    mhz[i] = sm_clock.mhz();
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  std::sort(mhz.begin(), mhz.end());
  const double med = ms[reps / 2];
  std::printf("%dx%dx%d tile %dx%dx%d: %.1f us, %.0f TFLOP/s, SM clock %.0f MHz\n", M, N, K, cfg.block_m, cfg.block_n,
              cfg.cluster, med * 1e3, 2.0 * M * N * K / (med * 1e-3) / 1e12, mhz[reps / 2]);
#ifdef LTX_SM90_STAMPS
  print_cta_stamps(run);
#endif
  return verdict[0] == 'o' ? 0 : 1;
}
