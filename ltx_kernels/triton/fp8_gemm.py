"""Blockwise FP8 GEMM, D[M, N] = A[M, K] @ B[N, K]^T with 1x128 (A) and 128x128 (B) scales.

One ``tl.dot`` per 128-wide K block into a fresh fp32 tile, promoted into the
fp32 accumulator with ``a_scale[m] * b_scale[n/128]`` (no fp16 accumulation, so
448-scaled operands cannot overflow), then fp32 bias and one bf16 rounding.
A K block's scales are loaded one block ahead, so their global-load latency is not
waited for between the MMA and the promotion; with BLOCK_N <= 128 a tile spans one
weight-scale column block, so the promotion is one FMA per element with a per-row
scale (a_scale * b_scale) instead of a per-element outer product.
Variants, picked per shape by the config cache:
  USE_TMA   operands (and D) through device-built tensor descriptors (Hopper TMA),
            out-of-range rows zero-filled / clipped by the copy engine;
  PERSISTENT one program per SM walking the tiles (TMA only).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .. import tuning
from . import cdiv, direct_launcher

from .._dispatch import interpreter_on

_HAS_DEVICE_TMA = hasattr(tl, "make_tensor_descriptor")
try:  # Triton >= 3.3 keeps the allocator per thread (a ContextVar)
    from triton.runtime._allocation import _allocator as _ALLOCATOR_VAR
except Exception:  # another Triton: set the allocator at every TMA launch
    _ALLOCATOR_VAR = None


def _allocate(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")  # the launch's device is current


def _ensure_allocator():
    """Device-side descriptors live in a small global scratch buffer that Triton asks for at each
    launch, through the allocator of the launching thread: set it there (a flag set by the first
    thread would leave every other thread without one)."""
    if not hasattr(triton, "set_allocator"):
        return
    if _ALLOCATOR_VAR is None or _ALLOCATOR_VAR.get() is not _allocate:
        triton.set_allocator(_allocate)


@triton.jit
def _tile_ids(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped launch order: GROUP_M row-tiles share each B column panel while it is in L2."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    group = pid // per_group
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    return pid_m, pid_n


@triton.jit
def _load_ab(a_src, b_src, m0, n0, offs_m, offs_n, k0, stride_am, stride_bn, M, N,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr):
    if USE_TMA:
        a = a_src.load([m0, k0])
        b = b_src.load([n0, k0])
    else:
        offs_k = k0 + tl.arange(0, 128)
        a = tl.load(a_src + offs_m[:, None] * stride_am + offs_k[None, :], mask=(offs_m < M)[:, None], other=0.0)
        b = tl.load(b_src + offs_n[:, None] * stride_bn + offs_k[None, :], mask=(offs_n < N)[:, None], other=0.0)
    return a, b


@triton.jit
def _scale_ptrs(sa_ptr, sb_ptr, offs_m, offs_n, n0, sa_sm, sb_sn, SB_SCALAR: tl.constexpr):
    """The tile rows' a_scale pointers (K block 0), and its b_scale pointer: the tile's one
    weight-scale row (SB_SCALAR) or one per column."""
    sa_ptrs = sa_ptr + offs_m * sa_sm
    if SB_SCALAR:
        sb_ptrs = sb_ptr + (n0 // 128) * sb_sn
    else:
        sb_ptrs = sb_ptr + (offs_n // 128) * sb_sn
    return sa_ptrs, sb_ptrs


@triton.jit
def _load_scales(sa_ptrs, sb_ptrs, kb, sa_sk, sb_sk, mask_m, mask_n, SB_SCALAR: tl.constexpr):
    """K block kb's a_scale rows and its b_scale: one value (SB_SCALAR: sb_ptrs points at the tile's
    one weight-scale row) or one per column. Only loads: a multiply here would make the MMA issue
    wait for them."""
    sa = tl.load(sa_ptrs + kb * sa_sk, mask=mask_m, other=0.0)
    if SB_SCALAR:
        sb = tl.load(sb_ptrs + kb * sb_sk)
    else:
        sb = tl.load(sb_ptrs + kb * sb_sk, mask=mask_n, other=0.0)
    return sa, sb


@triton.jit
def _promote(acc, p, sa, sb, SB_SCALAR: tl.constexpr):
    if SB_SCALAR:
        acc += p * (sa * sb)[:, None]  # one FMA per element
    else:
        acc += p * (sa[:, None] * sb[None, :])
    return acc


@triton.jit
def _fp8_gemm_nt_kernel(
    a_ptr, b_ptr, d_ptr, sa_ptr, sb_ptr, bias_ptr,
    M, N, K, stride_am, stride_bn, stride_dm, sa_sm, sa_sk, sb_sn, sb_sk,
    HAS_BIAS: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
):
    if USE_TMA:  # device-side descriptors: no per-launch host encoding
        a_src = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, 128])
        b_src = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, 128])
        d_src = tl.make_tensor_descriptor(d_ptr, shape=[M, N], strides=[stride_dm, 1],
                                          block_shape=[BLOCK_M, BLOCK_N])
    else:
        a_src = a_ptr
        b_src = b_ptr
        d_src = d_ptr
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    m0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    mask_m = offs_m < M
    mask_n = offs_n < N
    SB_SCALAR: tl.constexpr = BLOCK_N <= 128  # the tile lies in one 128-column weight-scale block
    sa_ptrs, sb_ptrs = _scale_ptrs(sa_ptr, sb_ptr, offs_m, offs_n, n0, sa_sm, sb_sn, SB_SCALAR)
    KB = K // 128
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    sa_k, sb_k = _load_scales(sa_ptrs, sb_ptrs, 0, sa_sk, sb_sk, mask_m, mask_n, SB_SCALAR)
    for kb in range(0, KB):
        # the next block's scales first (the last block reloads its own: never out of bounds)
        sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, min(kb + 1, KB - 1), sa_sk, sb_sk, mask_m, mask_n, SB_SCALAR)
        a, b = _load_ab(a_src, b_src, m0, n0, offs_m, offs_n, kb * 128, stride_am, stride_bn, M, N,
                        BLOCK_M, BLOCK_N, USE_TMA)
        p = tl.dot(a, tl.trans(b))
        acc = _promote(acc, p, sa_k, sb_k, SB_SCALAR)
        sa_k, sb_k = sa_n, sb_n
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
    d = acc.to(tl.bfloat16)
    if USE_TMA:
        d_src.store([m0, n0], d)
    else:
        tl.store(d_src + offs_m[:, None] * stride_dm + offs_n[None, :], d, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _fp8_gemm_nt_persistent_kernel(
    a_ptr, b_ptr, d_ptr, sa_ptr, sb_ptr, bias_ptr,
    M, N, K, stride_am, stride_bn, stride_dm, sa_sm, sa_sk, sb_sn, sb_sk,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):
    """One program per SM walking the tiles (TMA descriptors only). Triton's warp specialization
    of this loop (tl.range(warp_specialize=True), Triton >= 3.5) measured no faster on H200."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, 128])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, 128])
    d_desc = tl.make_tensor_descriptor(d_ptr, shape=[M, N], strides=[stride_dm, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    KB = K // 128
    SB_SCALAR: tl.constexpr = BLOCK_N <= 128
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        pid_m, pid_n = _tile_ids(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        offs_n = (n0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        mask_m = offs_m < M
        mask_n = offs_n < N
        sa_ptrs, sb_ptrs = _scale_ptrs(sa_ptr, sb_ptr, offs_m, offs_n, n0, sa_sm, sb_sn, SB_SCALAR)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        sa_k, sb_k = _load_scales(sa_ptrs, sb_ptrs, 0, sa_sk, sb_sk, mask_m, mask_n, SB_SCALAR)
        for kb in range(0, KB):
            sa_n, sb_n = _load_scales(sa_ptrs, sb_ptrs, min(kb + 1, KB - 1), sa_sk, sb_sk, mask_m, mask_n,
                                        SB_SCALAR)
            a = a_desc.load([m0, kb * 128])
            b = b_desc.load([n0, kb * 128])
            p = tl.dot(a, tl.trans(b))
            acc = _promote(acc, p, sa_k, sb_k, SB_SCALAR)
            sa_k, sb_k = sa_n, sb_n
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
        d_desc.store([m0, n0], acc.to(tl.bfloat16))


# ---------------------------------------------------------------------------------------------
# Host side: DeepGEMM-style readable config choice, then the per-GPU cache.

def heuristic(m: int, n: int, k: int, tma_ok: bool) -> dict:
    """Without a cached config. Small M from the H200 warmup at M buckets 64-512 and the eight
    LTX-2 (N, K) (``python -m ltx_kernels.warmup``; configs/NVIDIA_H200.json): 64x64 pointer tiles at every
    bucket-64 shape; 64x128 above, persistent with 2 programs per SM at 16 of 24 (pointer tiles at
    the rest)."""
    if m <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "USE_TMA": False}
    if m <= 512:
        if tma_ok:
            return {"BLOCK_M": 64, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4,
                    "USE_TMA": True, "PERSISTENT": True, "CTAS_PER_SM": 2}
        return {"BLOCK_M": 64, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "USE_TMA": False}
    if tma_ok:  # the H200 warmup's pick at 9 of its 12 quick shapes (python -m ltx_kernels.warmup --quick)
        return {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4,
                "USE_TMA": True, "PERSISTENT": True}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4,
            "USE_TMA": False}


def candidates(m: int, tma_ok: bool) -> list[dict]:
    tiles = [(64, 128, 4), (128, 128, 8), (128, 256, 8), (64, 256, 4)]
    if m <= 64:
        tiles = [(64, 128, 4), (64, 64, 4), (64, 256, 4)]
    out = []
    # No "issue block kb+1's dot before promoting block kb" variant: Triton (3.6 - 3.9) waits for a
    # dot right after issuing it unless its accumulator is loop-carried (pendings=0 in the TTGIR), so
    # the early issue overlapped nothing (measured: within a few % either way on the H200).
    for bm, bn, w in tiles:
        for stages in (3, 4):
            for tma in ((False, True) if tma_ok else (False,)):
                out.append({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8, "num_warps": w,
                            "num_stages": stages, "USE_TMA": tma})
    if tma_ok and m > 64:
        for stages in (3, 4):  # persistent: the fastest at M >= 4096 on the H200 since scales load ahead
            out.append({"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": stages,
                        "USE_TMA": True, "PERSISTENT": True})
        for stages, ctas in ((2, 3), (3, 2), (4, 2)):  # 64-row tiles, several programs per SM
            out.append({"BLOCK_M": 64, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": stages,
                        "USE_TMA": True, "PERSISTENT": True, "CTAS_PER_SM": ctas})
    return out


@functools.lru_cache(maxsize=None)
def _sm_count(index) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def tma_supported(a: torch.Tensor) -> bool:
    if not _HAS_DEVICE_TMA:
        return False
    if interpreter_on():
        # the interpreter emulates descriptors (seen working in triton 3.9, failing in 3.6)
        return tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9)
    return a.device.type == "cuda" and torch.cuda.get_device_capability(a.device) >= (9, 0)



def _launch(a, sa, b, sb, bias, d, cfg):
    """Launches; returns a direct launcher for (a, b, d, sa, sb, bias or sb) of the same signature
    (see ``direct_launcher``), or None."""
    m, k = a.shape
    n = b.shape[0]
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    scratch = cfg["USE_TMA"] and a.device.type == "cuda" and not interpreter_on()
    if scratch:
        _ensure_allocator()
    tiles = cdiv(m, bm) * cdiv(n, bn)
    args = (a, b, d, sa, sb, bias if bias is not None else sb,
            m, n, k, a.stride(0), b.stride(0), d.stride(0), sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1),
            bias is not None)
    if cfg.get("PERSISTENT"):
        # CTAS_PER_SM > 1: programs per SM that fit side by side (shared memory and registers
        # permitting), so one program's promotion runs under another's MMA
        programs = (_sm_count(a.device.index) if a.device.type == "cuda" else 4) * cfg.get("CTAS_PER_SM", 1)
        grid = (min(tiles, programs),)
        kernel = _fp8_gemm_nt_persistent_kernel
        args += (bm, bn, cfg["GROUP_M"], programs)
    else:
        grid = (tiles,)
        kernel = _fp8_gemm_nt_kernel
        args += (cfg["USE_TMA"], bm, bn, cfg["GROUP_M"])
    compiled = kernel[grid](*args, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    launch = direct_launcher(compiled, grid, args, 6)
    if launch is None or not scratch:
        return launch

    def launch_from_any_thread(*tensors):
        _ensure_allocator()
        launch(*tensors)

    return launch_from_any_thread


def _tma_ok_for(a, b, d) -> bool:
    # descriptors need 16-byte aligned bases and row strides
    return (tma_supported(a) and all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
                                     and t.stride(1) == 1 for t in (a, b, d)))


def config_for(m: int, n: int, k: int, a, b, d, sa, sb, bias) -> dict:
    tma_ok = _tma_ok_for(a, b, d)
    cfg = tuning.choose("fp8_gemm_nt", (n, k, tuning.m_bucket(m)), heuristic(m, n, k, tma_ok),
                        lambda: candidates(m, tma_ok),
                        lambda c: (lambda: _launch(a, sa, b, sb, bias, d, c)), device=a.device)
    if cfg.get("USE_TMA") and not tma_ok:
        cfg = dict(cfg, USE_TMA=False, PERSISTENT=False)
    return cfg


def fp8_gemm_nt(a, sa, b, sb, bias, d, cfg: dict | None = None):
    """Writes D into d. Returns a direct launcher for (a, b, d, sa, sb, bias or sb) of the same
    signature (see ``direct_launcher``), or None."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return None
    if k == 0:
        d.copy_(bias.to(d.dtype).expand(m, n) if bias is not None else torch.zeros_like(d))
        return None
    cfg = cfg or config_for(m, n, k, a, b, d, sa, sb, bias)
    key = tuple(sorted(cfg.items()))
    cfg = _shrunk.get(key, cfg)
    for attempt in _smaller_configs(cfg):
        try:
            launch = _launch(a, sa, b, sb, bias, d, attempt)
        except triton.runtime.OutOfResources:
            continue
        if attempt is not cfg:
            _shrunk[key] = attempt
        return launch
    raise RuntimeError(f"fp8_gemm_nt: no Triton config fits this GPU's shared memory (tried from {cfg})")


# config (as a sorted item tuple) -> the smaller one that fitted this GPU
_shrunk: dict = {}


def _smaller_configs(cfg: dict):
    """cfg, then the same with fewer pipeline stages, then 64x64 pointer tiles: a shipped or
    heuristic config may ask for more shared memory than a smaller GPU has (sm_89 and sm_120 have
    about 100 KB per SM against the H200's 227 KB); Triton raises OutOfResources at compile time."""
    yield cfg
    for stages in range(cfg["num_stages"] - 1, 1, -1):
        yield dict(cfg, num_stages=stages, CTAS_PER_SM=1) if cfg.get("PERSISTENT") else dict(cfg, num_stages=stages)
    yield {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 2, "USE_TMA": False}
