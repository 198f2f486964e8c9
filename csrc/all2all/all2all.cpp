// torch bindings of the All2All kernels: buffers, IPC handles, launch plans. The protocol is
// described in all2all_kernel.cu; validation of user input happens in ltx_kernels/all2all/.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "all2all.h"

using namespace ltx_all2all;

namespace {

// A failed runtime call also leaves its error as the thread's last error, which the next kernel
// launch check (torch's included) would report as its own; the setup catches these failures and
// goes on (another backend, or the exchange that tells the peers), so the error is taken here.
#define CUDA_CHECK(expr)                                                                       \
  do {                                                                                         \
    cudaError_t err__ = (expr);                                                                \
    if (err__ != cudaSuccess) {                                                                \
      (void)cudaGetLastError();                                                                \
      TORCH_CHECK(false, #expr " failed: ", cudaGetErrorString(err__));                        \
    }                                                                                          \
  } while (0)

long long signals_offset(long long capacity) { return (capacity + 255) / 256 * 256; }

int64_t alloc_block(int64_t capacity, int64_t device) {
  TORCH_CHECK(capacity > 0, "capacity must be positive");
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  void* ptr = nullptr;
  const size_t bytes = signals_offset(capacity) + sizeof(Signals);
  CUDA_CHECK(cudaMalloc(&ptr, bytes));
  CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());
  return reinterpret_cast<int64_t>(ptr);
}

void free_block(int64_t ptr, int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(reinterpret_cast<void*>(ptr)));
}

py::bytes ipc_handle(int64_t ptr, int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  cudaIpcMemHandle_t h;
  CUDA_CHECK(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(ptr)));
  return py::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
}

int64_t ipc_open(const std::string& handle, int64_t device) {
  TORCH_CHECK(handle.size() == sizeof(cudaIpcMemHandle_t), "bad IPC handle size ", handle.size());
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* ptr = nullptr;
  CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess));
  return reinterpret_cast<int64_t>(ptr);
}

void ipc_close(int64_t ptr, int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  CUDA_CHECK(cudaIpcCloseMemHandle(reinterpret_cast<void*>(ptr)));
}

// The host-mapped error word the kernels write. Allocated with `device` current: without the guard a
// process whose current device is another GPU (no set_device) would create a context there.
int64_t host_error_alloc(int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  void* ptr = nullptr;
  CUDA_CHECK(cudaHostAlloc(&ptr, 4 * sizeof(long long), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(ptr, 0, 4 * sizeof(long long));
  return reinterpret_cast<int64_t>(ptr);
}

// Freed with `device` current too (teardown may run on another thread, whose current device is 0).
void host_error_free(int64_t ptr, int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  CUDA_CHECK(cudaFreeHost(reinterpret_cast<void*>(ptr)));
}

std::vector<int64_t> host_error_read(int64_t ptr) {
  volatile long long* h = reinterpret_cast<volatile long long*>(ptr);
  return {h[0], h[1], h[2], h[3]};
}

// A non-owning uint8 view of `nbytes` at ptr (valid until the block is freed).
torch::Tensor buffer_view(int64_t ptr, int64_t nbytes, int64_t device) {
  auto opts = torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, device);
  return torch::from_blob(reinterpret_cast<void*>(ptr), {nbytes}, opts);
}

// Read back the device-side bookkeeping of a block (tests and diagnostics).
std::vector<int64_t> read_signals(int64_t base, int64_t capacity, int64_t device) {
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  Signals s;
  CUDA_CHECK(cudaMemcpy(&s, reinterpret_cast<char*>(base) + signals_offset(capacity), sizeof(s),
                        cudaMemcpyDeviceToHost));
  return {static_cast<int64_t>(s.epoch), static_cast<int64_t>(s.ready), static_cast<int64_t>(s.error)};
}

int pick_vec(std::initializer_list<long long> values) {
  long long g = 16;
  for (long long v : values) g = std::gcd(g, v < 0 ? -v : v);
  return g >= 16 ? 16 : g >= 8 ? 8 : g >= 4 ? 4 : g >= 2 ? 2 : 1;
}

// op: 0 send_recv_heads, 1 gather_heads, 2 allgather. x is contiguous [B, n, Hx, D]; heads is H of
// the full tensor (for gather_heads Hx = H / world). The output
// layouts are those of upstream (see ltx_kernels/all2all/). Validation happens in Python.
void launch(int64_t op, const torch::Tensor& x, const std::vector<int64_t>& bases, int64_t capacity,
            int64_t rank, const std::vector<int64_t>& counts, int64_t heads, int64_t num_ctas,
            double timeout_s, int64_t host_error, int64_t op_sig) {
  const int world = static_cast<int>(bases.size());
  TORCH_CHECK(world >= 1 && world <= kMaxPeers, "world size must be 1..", kMaxPeers);
  TORCH_CHECK(static_cast<int>(counts.size()) == world, "counts must have world-size entries");
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 4, "x must be a contiguous 4-D CUDA tensor");
  c10::cuda::CUDAGuard g(x.device());  // every runtime call below is for x's device
  TORCH_CHECK(num_ctas >= world, "num_ctas must be >= world size");
  const long long B = x.size(0), D = x.size(3), elem = x.element_size();
  const long long hpr = heads / world;
  std::vector<long long> prefix(world + 1, 0);
  for (int i = 0; i < world; ++i) prefix[i + 1] = prefix[i] + counts[i];
  const long long T = prefix[world];
  Plan p{};
  p.src = static_cast<const char*>(x.data_ptr());
  p.own = reinterpret_cast<Signals*>(reinterpret_cast<char*>(bases[rank]) + signals_offset(capacity));
  p.host_error = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&p.host_error), reinterpret_cast<void*>(host_error), 0));
  p.op_sig = static_cast<unsigned long long>(op_sig);
  p.batch = static_cast<int>(B);
  p.world = world;
  p.rank = static_cast<int>(rank);
  const double ns = timeout_s * 1e9;
  p.timeout_ns = ns >= 1.8e19 ? ~0ull : static_cast<unsigned long long>(ns);
  const long long chunk = hpr * D * elem;   // one rank's heads of one token
  const long long full = heads * D * elem;  // all heads of one token
  for (int t = 0; t < world; ++t) {
    char* base = reinterpret_cast<char*>(bases[t]);
    p.sig[t] = reinterpret_cast<Signals*>(base + signals_offset(capacity));
    if (op == 0) {          // x [B, c_r, H, D] -> target t: [B, T, hpr, D], rows p_r.. of heads t*hpr..
      p.rows[t] = counts[rank];
      p.src_off[t] = t * chunk;
      p.dst[t] = base + prefix[rank] * chunk;
      p.dst_bstride[t] = T * chunk;
    } else if (op == 1) {   // y [B, T, hpr, D] -> target t: [B, c_t, H, D], heads r*hpr.. of its tokens
      p.rows[t] = counts[t];
      p.src_off[t] = prefix[t] * chunk;
      p.dst[t] = base + rank * chunk;
      p.dst_bstride[t] = counts[t] * full;
    } else {                // x [B, c_r, H, D] -> target t: [B, T, H, D], rows p_r..
      p.rows[t] = counts[rank];
      p.src_off[t] = 0;
      p.dst[t] = base + prefix[rank] * full;
      p.dst_bstride[t] = T * full;
    }
  }
  if (op == 0) {
    p.src_rstride = full; p.src_bstride = counts[rank] * full; p.dst_rstride = chunk; p.row_bytes = chunk;
  } else if (op == 1) {
    p.src_rstride = chunk; p.src_bstride = T * chunk; p.dst_rstride = full; p.row_bytes = chunk;
  } else {
    p.src_rstride = full; p.src_bstride = counts[rank] * full; p.dst_rstride = full; p.row_bytes = full;
  }
  const int vec = pick_vec({p.row_bytes, chunk, full, static_cast<long long>(reinterpret_cast<uintptr_t>(p.src))});
  launch_plan(p, vec, static_cast<int>(num_ctas), at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CUDA-IPC All2All kernels (see ltx_kernels/all2all/)";
  m.attr("MAX_PEERS") = kMaxPeers;
  m.attr("THREADS") = kThreads;
  m.def("alloc_block", &alloc_block);
  m.def("free_block", &free_block);
  m.def("ipc_handle", &ipc_handle);
  m.def("ipc_open", &ipc_open);
  m.def("ipc_close", &ipc_close);
  m.def("host_error_alloc", &host_error_alloc);
  m.def("host_error_free", &host_error_free);
  m.def("host_error_read", &host_error_read);
  m.def("buffer_view", &buffer_view);
  m.def("read_signals", &read_signals);
  m.def("launch", &launch);
}
