// torch binding of the SM90 blockwise FP8 GEMM (kernel in fp8_gemm_sm90_kernel.cu). Argument
// validation with clear messages happens in ltx_kernels/gemm.py; these checks only guard the launch.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "fp8_gemm_sm90.h"

namespace {

void fp8_gemm_nt(const torch::Tensor& a, const torch::Tensor& sa, const torch::Tensor& b, const torch::Tensor& sb,
                 const c10::optional<torch::Tensor>& bias, torch::Tensor& d, int64_t block_m, int64_t block_n,
                 int64_t cluster, int64_t splits) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && d.is_cuda(), "fp8_gemm_nt: CUDA tensors expected");
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fn && b.scalar_type() == at::kFloat8_e4m3fn, "a, b must be e4m3");
  TORCH_CHECK(sa.scalar_type() == at::kFloat && sb.scalar_type() == at::kFloat, "scales must be fp32");
  TORCH_CHECK(d.scalar_type() == at::kBFloat16 && d.stride(1) == 1, "d must be bf16 with unit column stride");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 == 0 && d.stride(0) % 8 == 0,
              "d needs a 16-byte aligned base and a row stride that is a multiple of 8 elements");
  TORCH_CHECK(a.stride(1) == 1 && b.stride(1) == 1, "a and b need unit stride along K");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(K % 128 == 0 && N % 128 == 0 && b.size(1) == K, "N and K must be multiples of 128");
  TORCH_CHECK(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && K < (int64_t(1) << 31), "dims must fit int32");
  TORCH_CHECK(splits >= 1 && (K / 128) % splits == 0, "splits must divide K / 128");
  if (M == 0 || N == 0) return;
  ltx_gemm_sm90::Params p{};
  // sa's M stride is not in Params, so its layout is checked here; the launcher checks sb's.
  TORCH_CHECK((M == 1 || sa.stride(0) == 1) && sa.stride(1) % 4 == 0 && sa.stride(1) >= M &&
                  reinterpret_cast<uintptr_t>(sa.data_ptr()) % 16 == 0,
              "sa must be M-major with a 16-byte aligned base and K-block stride (ltx_kernels/gemm.py copies it so)");
  p.sa = sa.data_ptr<float>();
  p.sa_sk = sa.stride(1);
  p.sb = sb.data_ptr<float>();
  p.sb_sn = sb.stride(0);
  p.sb_sk = sb.stride(1);
  p.bias = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  p.d = reinterpret_cast<__nv_bfloat16*>(d.data_ptr());
  p.ldd = d.stride(0);
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.splits = static_cast<int>(splits);
  c10::cuda::CUDAGuard guard(a.device());
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const ltx_gemm_sm90::TileConfig cfg{static_cast<int>(block_m), static_cast<int>(block_n), static_cast<int>(cluster)};
  // split-K's fp32 partials (from the caching allocator: stream-ordered, fine under graph capture);
  // none where the two slices of a tile meet in a 2-CTA cluster (pair-K)
  torch::Tensor ws;
  if (ltx_gemm_sm90::uses_workspace(p, cfg, sms)) {
    ws = torch::empty({splits, M, N}, a.options().dtype(at::kFloat));
    p.ws = ws.data_ptr<float>();
  }
  const char* err = ltx_gemm_sm90::launch(p, a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), cfg, sms,
                                          at::cuda::getCurrentCUDAStream());
  if (err != nullptr) {
    // a runtime call that failed left its error as the thread's last one: take it (into the
    // message), or the next launch check (torch's, in whatever op runs next) would report it as its own
    const cudaError_t last = cudaGetLastError();
    TORCH_CHECK(false, "fp8_gemm_nt (sm90): ", err, last != cudaSuccess ? " (" : "",
                last != cudaSuccess ? cudaGetErrorString(last) : "", last != cudaSuccess ? ")" : "");
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "SM90 wgmma/TMA blockwise FP8 GEMM (see csrc/gemm_sm90)";
  m.def("fp8_gemm_nt", &fp8_gemm_nt, "D = blockwise-scaled A @ B^T + bias (bf16 out)", py::arg("a"), py::arg("sa"),
        py::arg("b"), py::arg("sb"), py::arg("bias"), py::arg("d"), py::arg("block_m"), py::arg("block_n"),
        py::arg("cluster"), py::arg("splits") = 1);
  m.def("smem_bytes", [](int bm, int bn, int c) { return ltx_gemm_sm90::smem_bytes({bm, bn, c}); },
        "shared memory per CTA of a tile config", py::arg("block_m"), py::arg("block_n"), py::arg("cluster"));
  m.def("pair_k_ctas",
        [](int bm, int bn, int c) {
          return ltx_gemm_sm90::pair_k_ctas({bm, bn, c}, at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
        },
        "CTAs of the current device that run at once as pair-K clusters of a tile config (0: no pair-K); the "
        "launcher takes pair-K for two K slices when every work unit (tiles x 2) fits",
        py::arg("block_m"), py::arg("block_n"), py::arg("cluster"));
  m.def("stages", [](int bm, int bn, int c) { return ltx_gemm_sm90::stages({bm, bn, c}); },
        "pipeline stages of a tile config", py::arg("block_m"), py::arg("block_n"), py::arg("cluster"));
}
