// CUDA-IPC head redistribution between the ranks of one node (send_recv_heads, gather_heads,
// allgather), without NVSHMEM.
//
// Every rank owns one cudaMalloc block: [data: capacity bytes][Signals]. Peers write straight into
// each other's data region (pointers opened with cudaIpcOpenMemHandle, or handed over directly when
// one process hosts several ranks). One launch = one epoch, counted on the device so that CUDA-graph
// replays stay in step:
//   1. entry handshake: every CTA publishes "ready = e" for its own rank (the previous epoch's
//      consumers ran before this kernel on the stream), then waits for its target's ready >= e, so
//      nobody overwrites a buffer its owner is still reading; the target's op signature (op, shape,
//      token counts), published before its ready, must equal this rank's, or nothing is copied;
//   2. copy (16-byte vectors when the layout allows);
//   3. the last CTA serving target t publishes arrive_t[rank] = e (release, system scope), unless a
//      CTA of this launch gave up a wait (and so skipped its rows): then t times out too;
//   4. CTA 0 waits for arrive_self[s] >= e from every source s, so kernel completion means the data
//      is here. Counters only grow: no reset, no exact-equality race.
// Every wait has a wall-clock timeout (%globaltimer). On timeout the kernel records
// {code, peer, phase, epoch} in host-mapped memory and exits: no trap, the context stays usable,
// and the host raises All2AllTimeout naming the peer.
#include "all2all.h"

namespace ltx_all2all {
namespace {

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ void record_error(const Plan& p, int peer, int phase, unsigned long long e) {
  if (atomicCAS(&p.own->error, 0ull, 1ull) == 0ull) {
    volatile long long* h = p.host_error;
    h[1] = peer;
    h[2] = phase;
    h[3] = static_cast<long long>(e);
    __threadfence_system();
    h[0] = 1;
    __threadfence_system();
  }
}

// Spin until *addr >= want; false on timeout (recorded) or when another wait already failed.
__device__ bool wait_geq(const Plan& p, const unsigned long long* addr, unsigned long long want, int peer,
                         int phase, unsigned long long e) {
  const unsigned long long start = globaltimer();
  unsigned int spins = 0;
  while (ld_acquire_sys(addr) < want) {
    if ((++spins & 63u) == 0u) {
      if (*reinterpret_cast<volatile unsigned long long*>(&p.own->error) != 0ull) return false;
      if (globaltimer() - start > p.timeout_ns) {
        record_error(p, peer, phase, e);
        return false;
      }
    }
  }
  return true;
}

template <int VEC>
struct Vec;
template <> struct Vec<16> { using T = int4; };
template <> struct Vec<8> { using T = int2; };
template <> struct Vec<4> { using T = int; };
template <> struct Vec<2> { using T = short; };
template <> struct Vec<1> { using T = char; };

// Copy target t's rows: unit u (VEC bytes) of the flattened (batch, row, col) space. A thread's
// units are u0 + k*stride; (b, row, col) advance incrementally, so there is no division per unit.
template <int VEC, int UNROLL>
__device__ void copy_rows(const Plan& p, int t, int cta_in_target, int ctas_for_target) {
  using V = typename Vec<VEC>::T;
  const long long upr = p.row_bytes / VEC;
  const long long rows = p.rows[t];
  const long long total = upr * rows * p.batch;
  const long long stride = static_cast<long long>(ctas_for_target) * blockDim.x;
  long long u = static_cast<long long>(cta_in_target) * blockDim.x + threadIdx.x;
  if (u >= total) return;
  const long long d_row = stride / upr, d_col = stride % upr;
  long long row_all = u / upr, col = u % upr;
  long long b = row_all / rows, r = row_all % rows;
  const char* src = p.src + p.src_off[t];
  char* dst = p.dst[t];
  const long long dbs = p.dst_bstride[t];
  auto advance = [&]() {
    col += d_col;
    long long dr = d_row;
    if (col >= upr) { col -= upr; ++dr; }
    r += dr;
    while (r >= rows) { r -= rows; ++b; }
  };
  for (; u < total; ) {
    V v[UNROLL];
    char* d[UNROLL];
    int n = 0;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
      if (u < total) {
        v[k] = __ldg(reinterpret_cast<const V*>(src + b * p.src_bstride + r * p.src_rstride + col * VEC));
        d[k] = dst + b * dbs + r * p.dst_rstride + col * VEC;
        n = k + 1;
        u += stride;
        advance();
      }
    }
#pragma unroll
    for (int k = 0; k < UNROLL; ++k)
      if (k < n) *reinterpret_cast<V*>(d[k]) = v[k];
  }
}

template <int VEC>
__global__ void __launch_bounds__(kThreads) a2a_kernel(Plan p) {
  const int world = p.world;
  const int t = blockIdx.x % world;
  const int cta_in_target = blockIdx.x / world;
  const int ctas_for_target = gridDim.x / world + (t < static_cast<int>(gridDim.x % world) ? 1 : 0);
  __shared__ unsigned long long s_epoch;
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    // Previous launches on this stream are complete, so the plain read sees the last epoch.
    const unsigned long long e = *reinterpret_cast<volatile unsigned long long*>(&p.own->epoch) + 1ull;
    s_epoch = e;
    *reinterpret_cast<volatile unsigned long long*>(&p.own->op_sig) = p.op_sig;  // ordered by the release
    st_release_sys(&p.own->ready, e);
    s_ok = wait_geq(p, &p.sig[t]->ready, e, t, kPhaseReady, e);
    // The target's signature of epoch e: it cannot have moved on, since its epoch e + 1 starts only
    // after this rank's arrival. A mismatch (ranks disagreeing on the op, its shape or the token
    // counts) would exchange wrong rows silently: record it instead.
    if (s_ok && *reinterpret_cast<volatile unsigned long long*>(&p.sig[t]->op_sig) != p.op_sig) {
      record_error(p, t, kPhaseMismatch, e);
      s_ok = 0;
    }
  }
  __syncthreads();
  const unsigned long long e = s_epoch;
  if (s_ok) copy_rows<VEC, 4>(p, t, cta_in_target, ctas_for_target);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    const unsigned long long old = atomicAdd(&p.own->sent[t], 1ull);
    if ((old + 1ull) % static_cast<unsigned long long>(ctas_for_target) == 0ull && s_ok) {
      __threadfence_system();
      // Target t is complete only if no CTA of this rank gave up: one that did skipped its rows.
      // A CTA records or sees the error before its increment of sent[t], which this one has seen.
      if (*reinterpret_cast<volatile unsigned long long*>(&p.own->error) == 0ull)
        st_release_sys(&p.sig[t]->arrive[p.rank], e);
    }
  }
  if (blockIdx.x == 0) {
    if (threadIdx.x < world) wait_geq(p, &p.own->arrive[threadIdx.x], e, threadIdx.x, kPhaseArrive, e);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long old = atomicAdd(&p.own->done_all, 1ull);
    if ((old + 1ull) % gridDim.x == 0ull) *reinterpret_cast<volatile unsigned long long*>(&p.own->epoch) = e;
  }
}

}  // namespace

void launch_plan(const Plan& p, int vec, int num_ctas, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(num_ctas)), block(kThreads);
  switch (vec) {
    case 16: a2a_kernel<16><<<grid, block, 0, stream>>>(p); break;
    case 8: a2a_kernel<8><<<grid, block, 0, stream>>>(p); break;
    case 4: a2a_kernel<4><<<grid, block, 0, stream>>>(p); break;
    case 2: a2a_kernel<2><<<grid, block, 0, stream>>>(p); break;
    default: a2a_kernel<1><<<grid, block, 0, stream>>>(p); break;
  }
}

}  // namespace ltx_all2all
