// Shared between the kernel (all2all_kernel.cu) and the torch bindings (all2all.cpp).
#pragma once
#include <cuda_runtime.h>

namespace ltx_all2all {

constexpr int kMaxPeers = 8;
constexpr int kThreads = 512;

// Layout of the tail of each rank's block; 128-byte lines keep remote and local words apart.
struct alignas(128) Signals {
  unsigned long long ready;                 // written by the owner
  unsigned long long op_sig;                // written by the owner before ready: what its op is
  unsigned long long pad0[14];
  unsigned long long arrive[kMaxPeers];     // arrive[s] written by source s
  unsigned long long pad1[8];
  unsigned long long epoch;                 // owner-local bookkeeping from here on
  unsigned long long done_all;
  unsigned long long error;
  unsigned long long pad2[5];
  unsigned long long sent[kMaxPeers];
};

enum Phase : int { kPhaseReady = 1, kPhaseArrive = 2, kPhaseMismatch = 3 };

struct Plan {
  const char* src;
  char* dst[kMaxPeers];              // where this rank's piece starts in target t's data region
  Signals* sig[kMaxPeers];           // target t's signals
  Signals* own;
  long long* host_error;             // host-mapped: [code, peer, phase, epoch]
  long long rows[kMaxPeers];         // rows (tokens) sent to target t, per batch entry
  long long src_off[kMaxPeers];      // bytes: target t's first row in src
  long long dst_bstride[kMaxPeers];  // bytes between batch entries in target t's output
  long long src_bstride, src_rstride, dst_rstride, row_bytes;
  unsigned long long timeout_ns;
  unsigned long long op_sig;         // the op, its shape and the token counts, equal on every rank
  int batch, world, rank;
};

void launch_plan(const Plan& p, int vec, int num_ctas, cudaStream_t stream);

}  // namespace ltx_all2all
