"""Public blockwise FP8 GEMM: ``D = sum_kb (sa[m,kb] * sb[n/128,kb]) * (A_kb @ B_kb^T) + bias``."""
from __future__ import annotations

import functools
import os
from typing import Optional

import torch

from . import _checks as chk
from . import _ext
from . import reference as ref
from . import tuning
from ._dispatch import Op, Memo, Plans, call, run_planned, torch_reasons, triton_reasons

FP8 = torch.float8_e4m3fn
gemm_op = Op("fp8_gemm_nt")
_checked = Memo()

# Eager fast path (see Plans): the triton and cuda backends offer a plan that allocates the output
# (when not given) and launches the same kernel with the same config directly; ~100 us of host
# time a call otherwise, more than a 1024x4096x4096 GEMM takes on an H200.
_plans = Plans()


def _plan(launch, shape, device):
    """launch(a, sa, b, sb, bias, d) as a plan for the public signature."""
    def run(a, a_scales, b, b_scales, bias, out):
        if out is None:
            out = torch.empty(shape, dtype=torch.bfloat16, device=device)
        launch(a, a_scales, b, b_scales, bias, out)
        return out

    return run


@gemm_op.register("torch", reasons=lambda a, sa, b, sb, bias, d: torch_reasons(a, sa, b, sb, bias))
def _gemm_torch(a, sa, b, sb, bias, d):
    d.copy_(ref.fp8_gemm_nt(a, sa, b, sb, bias))


@gemm_op.register("triton", reasons=lambda a, sa, b, sb, bias, d: triton_reasons(a, sa, b, sb, bias, d,
                                                                                 min_arch=(8, 9)))
def _gemm_triton(a, sa, b, sb, bias, d):
    from .triton import prepare

    prepare()
    from .triton import fp8_gemm as k

    launch = k.fp8_gemm_nt(a, sa, b, sb, bias, d)
    if launch is not None:
        _plans.offer(_plan(lambda a, sa, b, sb, bias, d: launch(a, b, d, sa, sb, sb if bias is None else bias),
                           d.shape, d.device))


def _cuda_reasons(a, sa, b, sb, bias, d):
    r = _ext.reasons("_C_gemm_sm90", a, sa, b, sb, bias, d, arch=(9, 0))
    if r:
        return r
    if a.shape[1] == 0:
        r.append("K = 0: nothing to multiply")
    # TMA descriptors need 16-byte aligned operand rows; the epilogue stores 16-byte row chunks
    if any(t.data_ptr() % 16 or t.stride(0) % 16 for t in (a, b)):
        r.append("a and b need 16-byte aligned bases and row strides (TMA)")
    if d.numel() and (d.data_ptr() % 16 or d.stride(0) % 8):
        r.append("out needs a 16-byte aligned base and a row stride that is a multiple of 8")
    return r


# The SM90 kernel's instantiations, (block_m, block_n, cluster), with the relative rate of one SM on
# a tile of each (output elements per unit time) in its any-K stream loop, measured on the H200,
# configs alternated in one run. 256x128 (two consumers of two 64-row waves, its K loop unrolled by
# the ring depth) against 192x128 (three consumers of one wave) at the six LTX-2 shapes, sustained,
# wave counts divided out: 0.997-1.031x (mean 1.013); 256x128 in 2-CTA clusters 0.97x of one CTA.
# The rest from the standalone harness at 16384x4096x4096 and 16384x16384x4096 (before the
# unrolled ring, when 256x128 ran at 1.00, and before 128x128's two accumulators): 128x128
# 0.92-0.95, and against 192x128, 128x128x2 0.84-0.88x and 128x192 0.79-0.86x. 128x64 (twice
# 128x128's tiles, for small M): one wave of it took 0.87-0.92x the time of one wave of 128x128 at
# M = 128-512 (bench/results/2026-12-04-h200-sm90-2cta-and-128x64), half the area in 0.9x the time.
# The runs and how to repeat them: docs/sm90-gemm.md, "Tile configs".
SM90_TILES = {
    (256, 128, 1): 1.05,
    (192, 128, 1): 1.04,
    (256, 128, 2): 1.01,
    (128, 128, 1): 0.93,
    (128, 128, 2): 0.89,
    (128, 192, 1): 0.875,
    (128, 64, 1): 0.52,
}
# The whole-ring loop, which the kernel runs where a tile's K blocks are a multiple of the ring
# depth (SM90_RING_DEPTH stages for these configs, which hold every LTX-2 K), is costed in SM
# cycles a work unit, K blocks x c + t: c a 128-K block, t the tile's boundary (its epilogue and
# the next tile's start). The boundary makes the choice depend on K: per output, 256x128x1's K
# loop is as fast as 192x128x1's (0.2 % slower) and its boundary 22 % cheaper, which counts four
# times as much at K = 2048 as at 8192. (c, t) of the kernel as built: least squares over Nsight
# Compute cycles (one launch each) at seven shapes, the mean of two runs on an H100 (the H200 has
# the same SMs; its fit of the kernel before the one-round epilogue had c within 1.3 %),
# tools/tile_boundary_fit.py on bench/results/2026-12-06-h100-sm90-tiles-and-small-m/tiles_ncu_cycles_run*.txt;
# 256x128x2's, since the clusters' producer-tail exit, on
# bench/results/2026-12-06-h100-sm90-2cta-picks-block-and-refit/cycles_run*.txt (whose one-CTA
# fits, 256x128x1 c = 1076-1080 and t = 3374-3821, 192x128x1 815-818 and 2930-2954, show how far
# t moves between runs). SM90_CLUSTER_UNDER_LOAD below is fitted against 256x128x2's pair, so the
# two are refitted together.
SM90_WHOLE_RING = {
    (256, 128, 1): (1076, 3124),
    (192, 128, 1): (805, 3014),
    (256, 128, 2): (1084, 3436),
}
SM90_RING_DEPTH = 4
# On SM90_TILES's scale: 192x128x1 keeps 1.07 at every K, the mean of its whole-ring rate at the
# eight shapes of bench/results/2026-12-04-h200-sm90-whole-ring (sustained, against the stream
# loop's 1.04; 1.045-1.088), and the other two take their cycles' ratio to it at the same K.
_WHOLE_RING_ANCHOR = ((192, 128, 1), 1.07)
# Under sustained load the 700 W limit sets the SM clock, and the clock follows the energy an
# output costs: the 2-CTA tile multicasts A, so its CTAs read 0.0078 bytes of operands from L2 an
# output against 256x128x1's 0.0117 (Nsight Compute at 8192x4096x4096: L2 61 % busy against 70 %,
# 0.6 % more cycles). Where its grid runs at least SM90_CLUSTER_MIN_WAVES waves, it ran
# faster than the cycles above predict, sustained, at the twelve shapes measured: measured over
# predicted, geometric mean 1.035 (0.999-1.109) in two runs on an H100 timing the host's one-CTA
# pick beside the 2-CTA tile forced (bench/results/2026-12-06-h100-sm90-2cta-beside-host-picks),
# 1.034 (1.011-1.077) in three runs of a later lease timing the 2-CTA pick beside 256x128x1 forced
# (bench/results/2026-12-06-h100-sm90-2cta-picks-block-and-refit), 1.022 (0.997-1.063) in two
# runs of a third (bench/results/2026-12-06-h100-sm90-sustained-head-start): 1.03 is the three
# sets' geometric mean, which picks as 1.022 and 1.035 do at the 17 shapes measured;
# tools/gemm_ratios.py --cluster-load-factor recomputes it from such runs. With fewer waves it
# lost (0.944 at 1024x4096x4096, 0.977 at 3000x2176x7168), so the factor counts only in
# multi-wave grids.
SM90_CLUSTER_UNDER_LOAD = 1.03
SM90_CLUSTER_MIN_WAVES = 4


def _whole_ring_elements_per_cycle(cfg: tuple, k_blocks: int) -> float:
    c, t = SM90_WHOLE_RING[cfg]
    return cfg[0] * cfg[1] / (k_blocks * c + t)


def _whole_ring(cfg: tuple, k_blocks: Optional[int]) -> bool:
    """Whether the kernel runs cfg's work units of k_blocks K blocks in its whole-ring loop."""
    return cfg in SM90_WHOLE_RING and bool(k_blocks) and k_blocks % SM90_RING_DEPTH == 0


def sm90_tile_rate(cfg: tuple, k_blocks: Optional[int] = None) -> float:
    """The relative rate of a tile config whose work units stream k_blocks K blocks each (None:
    unknown, the any-K loop's rate)."""
    if _whole_ring(cfg, k_blocks):
        anchor, anchor_rate = _WHOLE_RING_ANCHOR
        return anchor_rate * (_whole_ring_elements_per_cycle(cfg, k_blocks)
                              / _whole_ring_elements_per_cycle(anchor, k_blocks))
    return SM90_TILES[cfg]


@functools.lru_cache(maxsize=None)
def _forced() -> tuple:
    """LTX_KERNELS_SM90_TILE="256,128,2", or "128,128,1,4" with 4 K slices: every SM90 launch of
    the process takes that config (benchmarks); () when unset. Read at the first SM90 GEMM."""
    text = os.environ.get("LTX_KERNELS_SM90_TILE", "").strip()
    if not text:
        return ()
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) not in (3, 4) or vals[:3] not in SM90_TILES or (len(vals) == 4 and vals[3] < 1):
        raise ValueError(f"LTX_KERNELS_SM90_TILE={text!r}: expected BM,BN,CLUSTER or BM,BN,CLUSTER,SPLITS with "
                         f"(BM, BN, CLUSTER) one of {sorted(SM90_TILES)} and SPLITS >= 1 (dividing K / 128)")
    return vals


def _sm90_units(m: int, n: int, cfg: tuple) -> int:
    """Work units (output tiles; one per cluster of horizontally adjacent tiles) of an M x N output."""
    bm, bn, cl = cfg
    tiles_n = -(-n // bn)
    return -(-m // bm) * -(-tiles_n // cl)


def _sm90_waves(m: int, n: int, cfg: tuple, num_sms: int) -> int:
    """Work units of the busiest CTA of the persistent grid (one cluster per cl SMs)."""
    return -(-_sm90_units(m, n, cfg) // (num_sms // cfg[2]))


def _sm90_cost(m: int, n: int, cfg: tuple, num_sms: int, k_blocks: Optional[int], under_load: bool = True) -> float:
    """Estimated time of an M x N output in cfg's tiles: whole waves of work units, each tile its area
    over its rate; under_load=False leaves out the 2-CTA tile's clock factor (cycles alone)."""
    waves = _sm90_waves(m, n, cfg, num_sms)
    rate = sm90_tile_rate(cfg, k_blocks)
    if under_load and cfg[2] > 1 and _whole_ring(cfg, k_blocks) and waves >= SM90_CLUSTER_MIN_WAVES:
        rate *= SM90_CLUSTER_UNDER_LOAD
    return waves * cfg[0] * cfg[1] / rate


def sm90_tile_config(m: int, n: int, num_sms: int, k: Optional[int] = None, pair_ctas: Optional[int] = None) -> tuple:
    """The (block_m, block_n, cluster) with the least estimated time for an M x N (x K) output on a
    device with num_sms SMs: whole waves of tiles over the persistent grid, each tile costing its
    area over its measured rate (so padding and a ragged last wave count against big tiles; K
    decides which of the kernel's loops, and so which rate, applies). Where that pick leaves at
    least a third of the SMs idle, a one-CTA tile whose units fit twice in pair_ctas runs in
    pair-K (sm90_split_k) if its estimate is lower: at 256x2176x7168 128x128 in pairs beats 128x64
    whole."""
    if forced := _forced():
        return forced[:3]
    k_blocks = k // 128 if k else None
    best = min(SM90_TILES, key=lambda cfg: _sm90_cost(m, n, cfg, num_sms, k_blocks))
    if not k_blocks or _sm90_units(m, n, best) * 3 > num_sms // best[2] * 2:
        return best
    pair_ctas = _default_pair_ctas(num_sms) if pair_ctas is None else pair_ctas
    best_us = _sm90_cost(m, n, best, num_sms, k_blocks) * k_blocks * _US_PER_COST
    for cfg in SM90_PAIR_K:
        if _pair_k_fits(m, n, k_blocks, cfg, pair_ctas) and (us := _pair_k_us(cfg, k_blocks)) < best_us:
            best, best_us = cfg, us
    return best


# Split-K's cost model, fitted on the H200 to the extension's 128x128 tile at 256x4096x4096 and
# 256x2176x7168 with 1, 2 and 4 slices (CUDA-graph replays, `tools/probe_sm90.py --graph --splits
# 1,2,4`; bench/results/2026-12-04-h200-sm90-unroll-ahead): one SM streams a 128x128x128 block in
# about 0.45 us; cutting K adds a fixed 3.8 us (the reduction kernel and the partials' tail) and
# the fp32 partials' traffic (written, then read: 8 * splits * M * N bytes) at about 2.1 TB/s.
_SPLIT_BLOCK_US = 0.45
_SPLIT_FIXED_US = 3.8
_SPLIT_BYTES_PER_US = 2.1e6
# _sm90_cost (area over rate, per wave) in microseconds per K block, on the 128x128 block's scale
_US_PER_COST = _SPLIT_BLOCK_US * SM90_TILES[(128, 128, 1)] / (128 * 128)
# Pair-K (two slices of a one-CTA tile in a 2-CTA cluster, rank 1's fp32 partial copied into rank
# 0's shared memory: no workspace, no second kernel) costs what the halved K loop does not halve:
# the pipeline's fill, the exchange and the epilogue, growing with the tile. Fitted to CUDA-graph
# times on an H100 against the same tile unsplit, with the model's own block cost
# (bench/results/2026-12-07-h100-sm90-pair-k-on-main, 128-256 rows, K >= 4096): 128x64 4.0-4.5 us
# at four shapes, 128x128 5.7-6.2 at five; 2.6 us plus 1.7 a 128x64 area. Against another tile
# unsplit the model holds only where that tile leaves SMs idle: with 102 and 128 units of 128x64
# (384x2176x7168, 512x2048x8192, 256x4096x4096) 128x128 in pairs ran 0.87-1.00x of it, with 68
# (256x2176x7168) 1.13-1.15x, so sm90_tile_config weighs pairs only against a pick that leaves
# at least a third of the SMs idle.
_PAIR_FIXED_US = 2.6
_PAIR_US_PER_AREA = 1.7
# the one-CTA tiles whose ring holds the peer's partial (the kernel's Config::kPairFits)
SM90_PAIR_K = ((256, 128, 1), (192, 128, 1), (128, 128, 1), (128, 64, 1))


def _block_us(cfg: tuple, k_blocks: int) -> float:
    """Microseconds one SM takes for a K block of a cfg tile in a work unit of k_blocks K blocks."""
    return _SPLIT_BLOCK_US * cfg[0] * cfg[1] / (128 * 128) * SM90_TILES[(128, 128, 1)] / sm90_tile_rate(cfg, k_blocks)


def _default_pair_ctas(num_sms: int) -> int:
    """CTAs resident as 2-CTA clusters when the extension is not asked: every pair of SMs."""
    return num_sms // 2 * 2


def _pair_k_fits(m: int, n: int, k_blocks: int, cfg: tuple, pair_ctas: int) -> bool:
    """Whether the launcher runs two K slices of cfg as pair-K (and the split rule allows two)."""
    return (cfg in SM90_PAIR_K and k_blocks % 2 == 0 and k_blocks // 2 >= 4
            and _sm90_units(m, n, cfg) * 2 <= pair_ctas)


def _pair_k_us(cfg: tuple, k_blocks: int) -> float:
    """Estimated time of two K slices of cfg in pair-K (one wave of pairs)."""
    half = k_blocks // 2
    return half * _block_us(cfg, half) + _PAIR_FIXED_US + _PAIR_US_PER_AREA * cfg[0] * cfg[1] / (128 * 64)


def sm90_split_k(m: int, n: int, k: int, cfg: tuple, num_sms: int, pair_ctas: Optional[int] = None) -> int:
    """How many K slices each output tile is cut into (small M, where the tiles alone leave SMs
    idle): the power of two with the least estimated time, every slice in one wave and >= 4 of the
    K blocks. Each CTA then streams fewer K blocks into an fp32 partial. Two slices whose units
    all fit at once (pair_ctas: CTAs resident as 2-CTA clusters, the extension's pair_k_ctas; None:
    every pair of SMs) meet in a cluster (pair-K); otherwise a second kernel sums the slices in
    order from a workspace, adds the bias and rounds to bf16, and that pass and the partials'
    traffic are what the split costs, so at 256x4096x4096 (64 tiles of 128x128 on 132 SMs) one
    slice in the workspace would be faster than two."""
    if len(forced := _forced()) > 3:
        if (k // 128) % forced[3]:
            raise ValueError(f"LTX_KERNELS_SM90_TILE: {forced[3]} K slices do not divide this GEMM's K / 128 = "
                             f"{k // 128} (K = {k})")
        return forced[3]
    bm, bn, cl = cfg
    units = _sm90_units(m, n, cfg)
    kb = k // 128
    pair_ctas = _default_pair_ctas(num_sms) if pair_ctas is None else pair_ctas

    def cost(s):
        if s == 2 and _pair_k_fits(m, n, kb, cfg, pair_ctas):
            return _pair_k_us(cfg, kb)
        extra = _SPLIT_FIXED_US + 8 * s * m * n / _SPLIT_BYTES_PER_US if s > 1 else 0.0
        return kb / s * _block_us(cfg, kb // s) + extra

    best, s = 1, 2
    while units * s <= num_sms // cl and kb % s == 0 and kb // s >= 4:
        if cost(s) < cost(best):
            best = s
        s *= 2
    return best


@functools.lru_cache(maxsize=None)
def _num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _tma_scales(sa: torch.Tensor) -> torch.Tensor:
    """sa as the SM90 kernel's TMA reads it: M-major, 16-byte aligned base and K-block stride (what
    quantize_blockwise writes); any other layout is copied into that one."""
    m, kb = sa.shape
    if (m == 1 or sa.stride(0) == 1) and sa.stride(1) % 4 == 0 and sa.stride(1) >= m and sa.data_ptr() % 16 == 0:
        return sa
    return ref.empty_aligned_scales(m, kb, sa.device, zero=False).copy_(sa)


def _tma_weight_scales(sb: torch.Tensor) -> torch.Tensor:
    """sb as the SM90 kernel's TMA reads it: K-block stride 1, row stride a multiple of 4, 16-byte
    aligned base (what the weight quantizers write when K / 128 is a multiple of 4, as at every
    LTX-2 shape); any other layout (expanded ones too) is copied into that one."""
    nb, kb = sb.shape
    rows_ok = nb == 1 or (sb.stride(0) % 4 == 0 and sb.stride(0) >= kb)
    if (kb == 1 or sb.stride(1) == 1) and rows_ok and sb.data_ptr() % 16 == 0:
        return sb
    return torch.empty(nb, ref.align4(kb), dtype=torch.float32, device=sb.device)[:, :kb].copy_(sb)


@functools.lru_cache(maxsize=None)
def _pair_k_ctas(index: int) -> int:
    """CTAs of device `index` resident at once as pair-K clusters, the least over the tiles that
    have it (the extension's count; one CTA an SM each, so the same for all of them; without the
    extension, the model's every pair of SMs)."""
    mod = _ext.load("_C_gemm_sm90")[0]
    if mod is None:
        return _default_pair_ctas(_num_sms(index))
    with torch.cuda.device(index):
        return min(mod.pair_k_ctas(*cfg) for cfg in SM90_PAIR_K)


def sm90_plan(m: int, n: int, k: int, index: int = 0) -> tuple:
    """The tile config and K slices the cuda backend launches an M x N x K GEMM with on CUDA
    device `index`."""
    sms, pair_ctas = _num_sms(index), _pair_k_ctas(index)
    cfg = sm90_tile_config(m, n, sms, k, pair_ctas)
    return cfg, sm90_split_k(m, n, k, cfg, sms, pair_ctas)


def sm90_launch_args(a, sa, b, sb) -> tuple:
    """What the cuda backend passes the extension besides the tensors: the scales in the layouts
    its TMA reads (copies where needed), the tile config and the K slices for this device."""
    cfg, splits = sm90_plan(a.shape[0], b.shape[0], a.shape[1], a.device.index or 0)
    return _tma_scales(sa), _tma_weight_scales(sb), cfg, splits


@gemm_op.register("cuda", reasons=_cuda_reasons)
def _gemm_cuda(a, sa, b, sb, bias, d):
    mod, _ = _ext.load("_C_gemm_sm90")
    sa_tma, sb_tma, cfg, splits = sm90_launch_args(a, sa, b, sb)
    mod.fp8_gemm_nt(a, sa_tma, b, sb_tma, bias, d, *cfg, splits)
    if sa_tma is sa and sb_tma is sb:  # (a copy would be needed again on every call)
        _plans.offer(_plan(lambda a, sa, b, sb, bias, d: mod.fp8_gemm_nt(a, sa, b, sb, bias, d, *cfg, splits),
                           d.shape, d.device))


# The warmup times both compiled backends through this function at each of its shapes (L2 flushed
# before every call, each backend with its own tuned config) and records the faster as "fp8_gemm_nt_backend"
# under (N, K, M bucket); "auto" then tries that one first. (Without a record: the priority order,
# the CUDA extension first.)
BACKEND_CHOICE = "fp8_gemm_nt_backend"


def _measured_preference(a, sa, b, sb, bias, d):
    if a.device.type != "cuda":
        return None
    n, k, bucket = b.shape[0], a.shape[1], tuning.m_bucket(a.shape[0])
    hit = tuning.lookup(BACKEND_CHOICE, (n, k, bucket), a.device)
    if not hit or hit.get("backend") not in ("cuda", "triton"):
        return None
    first = hit["backend"]
    order = (first, "triton" if first == "cuda" else "cuda", "torch")
    return order, f"{first} measured faster at N={n}, K={k}, M bucket {bucket} (tuning cache)"


gemm_op.preference = _measured_preference


def _gemm_out_op_impl(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                 bias: Optional[torch.Tensor], out: torch.Tensor, backend: str) -> None:
    gemm_op(backend, a, a_scales, b, b_scales, bias, out)


def _gemm_out_registered(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                         bias: Optional[torch.Tensor], out: torch.Tensor, backend: str) -> None:
    key = tuning.plan_key(a, a_scales, b, b_scales, bias, out, backend=backend)
    run_planned(_plans, key, (a, a_scales, b, b_scales, bias, out), _gemm_out_op_impl, a, a_scales, b, b_scales, bias,
                out, backend)


_gemm_out_op = torch.library.custom_op("ltx_kernels::fp8_gemm_nt_out", _gemm_out_registered, mutates_args=("out",))


@_gemm_out_op.register_fake
def _(a, a_scales, b, b_scales, bias, out, backend):
    return None


def _gemm_new_op_impl(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                 bias: Optional[torch.Tensor], backend: str) -> torch.Tensor:
    d = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
    gemm_op(backend, a, a_scales, b, b_scales, bias, d)
    return d


def _gemm_new_registered(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor,
                         bias: Optional[torch.Tensor], backend: str) -> torch.Tensor:
    key = tuning.plan_key(a, a_scales, b, b_scales, bias, None, backend=backend)
    return run_planned(_plans, key, (a, a_scales, b, b_scales, bias, None), _gemm_new_op_impl, a, a_scales, b,
                       b_scales, bias, backend)


_gemm_new_op = torch.library.custom_op("ltx_kernels::fp8_gemm_nt", _gemm_new_registered, mutates_args=())


@_gemm_new_op.register_fake
def _(a, a_scales, b, b_scales, bias, backend):
    return a.new_empty(a.shape[0], b.shape[0], dtype=torch.bfloat16)


def validate(a, a_scales, b, b_scales, bias, out):
    """Checks shared by every GEMM entry point; returns (a, b, bias) with unit inner stride, fp32 bias."""
    chk.tensor("a", a, dtypes=(FP8,), ndim=2)
    chk.tensor("b", b, dtypes=(FP8,), ndim=2)
    m, k = a.shape
    n, k2 = b.shape
    if k != k2:
        raise ValueError(f"a is [M, K] = {tuple(a.shape)} and b is [N, K] = {tuple(b.shape)}: K differs")
    chk.multiple_of("K (a.shape[1])", k, 128)
    chk.multiple_of("N (b.shape[0])", n, 128)
    chk.tensor("a_scales", a_scales, dtypes=(torch.float32,), ndim=2)
    chk.tensor("b_scales", b_scales, dtypes=(torch.float32,), ndim=2)
    if tuple(a_scales.shape) != (m, k // 128):
        raise ValueError(f"a_scales must be [M, K/128] = [{m}, {k // 128}], got {tuple(a_scales.shape)}")
    if tuple(b_scales.shape) != (n // 128, k // 128):
        raise ValueError(f"b_scales must be [N/128, K/128] = [{n // 128}, {k // 128}], got {tuple(b_scales.shape)}")
    if bias is not None:
        chk.tensor("bias", bias, dtypes=chk.FLOAT_DTYPES)
        if tuple(bias.shape) != (n,):
            raise ValueError(f"bias must be [N] = [{n}], got {tuple(bias.shape)}")
    if out is not None:
        chk.tensor("out", out, dtypes=(torch.bfloat16,), ndim=2)
        if tuple(out.shape) != (m, n):
            raise ValueError(f"out must be [M, N] = [{m}, {n}], got {tuple(out.shape)}")
        if out.stride(1) != 1:
            raise ValueError(f"out must have unit stride along N, got strides {out.stride()}")
    chk.same_device(a=a, a_scales=a_scales, b=b, b_scales=b_scales, bias=bias, out=out)
    return _normalized(a, b, bias)


def _normalized(a, b, bias):
    if bias is not None:
        bias = bias.float().contiguous()
    if a.stride(1) != 1:
        a = a.contiguous()
    if b.stride(1) != 1:
        b = b.contiguous()
    return a, b, bias


def fp8_gemm_nt(a, a_scales, b, b_scales, bias=None, *, out=None, backend="auto"):
    """Blockwise FP8 GEMM ``D[M, N] = A[M, K] @ B[N, K]^T`` with bf16 output.

    a, b float8_e4m3fn; a_scales fp32 logical ``[M, K/128]`` (the layout ``quantize_blockwise``
    writes; other strides are honoured); b_scales fp32 ``[N/128, K/128]``; bias fp32 ``[N]``.
    Any M >= 0; N and K multiples of 128. fp32 accumulation promoted every 128-K block.
    """
    key = tuning.plan_key(a, a_scales, b, b_scales, bias, out, backend=backend)
    plan = _plans.get(key)
    if plan is not None:
        return plan(a, a_scales, b, b_scales, bias, out)
    a_in, b_in, bias_in = a, b, bias
    if _checked.get(key):
        a, b, bias = _normalized(a, b, bias)
    else:
        a, b, bias = validate(a, a_scales, b, b_scales, bias, out)
        _checked.put(key)
    # a plan may only be kept when the kernel read the caller's own tensors (no copies were needed)
    plan_key = key if a is a_in and b is b_in and bias is bias_in else None
    if out is None:
        return _plans.record(plan_key, call, _gemm_new_op, _gemm_new_op_impl, a, a_scales, b, b_scales, bias, backend)
    _plans.record(plan_key, call, _gemm_out_op, _gemm_out_op_impl, a, a_scales, b, b_scales, bias, out, backend)
    return out
