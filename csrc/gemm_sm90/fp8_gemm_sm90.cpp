// torch binding of the SM90 blockwise FP8 GEMM (kernel in fp8_gemm_sm90_kernel.cu). Argument
// validation with clear messages happens in ltx_kernels/gemm.py; these checks only guard the launch.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "fp8_gemm_sm90.h"

namespace {

void fp8_gemm_nt(const torch::Tensor& a, const torch::Tensor& sa, const torch::Tensor& b, const torch::Tensor& sb,
                 const c10::optional<torch::Tensor>& bias, torch::Tensor& d, int64_t block_n) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && d.is_cuda(), "fp8_gemm_nt: CUDA tensors expected");
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fn && b.scalar_type() == at::kFloat8_e4m3fn, "a, b must be e4m3");
  TORCH_CHECK(sa.scalar_type() == at::kFloat && sb.scalar_type() == at::kFloat, "scales must be fp32");
  TORCH_CHECK(d.scalar_type() == at::kBFloat16 && d.stride(1) == 1, "d must be bf16 with unit column stride");
  TORCH_CHECK(a.stride(1) == 1 && b.stride(1) == 1, "a and b need unit stride along K");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(K % 128 == 0 && N % 128 == 0 && b.size(1) == K, "N and K must be multiples of 128");
  TORCH_CHECK(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && K < (int64_t(1) << 31), "dims must fit int32");
  if (M == 0 || N == 0) return;
  ltx_gemm_sm90::Params p{};
  p.sa = sa.data_ptr<float>();
  p.sa_sm = sa.stride(0);
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
  c10::cuda::CUDAGuard guard(a.device());
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const char* err = ltx_gemm_sm90::launch(p, a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0),
                                          static_cast<int>(block_n), sms, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == nullptr, "fp8_gemm_nt (sm90): ", err ? err : "");
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "SM90 wgmma/TMA blockwise FP8 GEMM (see csrc/gemm_sm90)";
  m.def("fp8_gemm_nt", &fp8_gemm_nt, "D = blockwise-scaled A @ B^T + bias (bf16 out)", py::arg("a"), py::arg("sa"),
        py::arg("b"), py::arg("sb"), py::arg("bias"), py::arg("d"), py::arg("block_n") = 128);
  m.def("smem_bytes", &ltx_gemm_sm90::smem_bytes);
}
