import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch
from ltx_kernels import gemm
from ltx_kernels.triton import prepare

import oracle
from helpers import gemm_operands, gemm_reference, rel_err

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize("m", [1, 7, 130])
@pytest.mark.parametrize("n,k", [(128, 128), (256, 384), (384, 256)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_dequantized_reference(device, m, n, k, with_bias):
    qa, sa, qb, sb = gemm_operands(m, n, k, device)
    bias = torch.randn(n, device=device) if with_bias else None
    out = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16)  # poisoned
    lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend="triton")
    assert torch.isfinite(out.float()).all()
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


@pytest.mark.parametrize("tma,bm,bn", [(False, 64, 128), (True, 64, 256), (False, 128, 128), (True, 128, 64)])
def test_every_kernel_variant(device, tma, bm, bn):
    """Pointer and TMA loads; BLOCK_N <= 128 (one weight scale per tile) and 256 (two)."""
    prepare()
    from ltx_kernels.triton import fp8_gemm as kg

    m, n, k = 70, 384, 384
    qa, sa, qb, sb = gemm_operands(m, n, k, device, zero_blocks=True)
    bias = torch.randn(n, device=device)
    d = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16)
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 2, "num_warps": 4, "num_stages": 3,
           "USE_TMA": tma}
    kg.fp8_gemm_nt(qa, sa, qb, sb, bias, d, cfg)
    assert torch.isfinite(d.float()).all()
    assert rel_err(d, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


@pytest.mark.parametrize("bm,bn,ctas", [(64, 128, 1), (128, 256, 1), (128, 128, 1), (64, 128, 3)])
def test_persistent_variant(device, bm, bn, ctas):
    prepare()
    from ltx_kernels.triton import fp8_gemm as kg

    m, n, k = 300, 640, 384  # more tiles than the interpreter's 4 "SMs": every program loops
    qa, sa, qb, sb = gemm_operands(m, n, k, device, zero_blocks=True)
    if not kg.tma_supported(qa):
        pytest.skip("TMA descriptors not available here")
    bias = torch.randn(n, device=device)
    d = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16)
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 2, "num_warps": 4, "num_stages": 3,
           "USE_TMA": True, "PERSISTENT": True, "CTAS_PER_SM": ctas}
    kg.fp8_gemm_nt(qa, sa, qb, sb, bias, d, cfg)
    assert torch.isfinite(d.float()).all()
    assert rel_err(d, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


def test_zero_blocks_and_nontrivial_scales(device):
    qa, sa, qb, sb = gemm_operands(33, 256, 384, device, zero_blocks=True)
    sa = sa * 3.0  # non-trivial values, and row-major strides instead of the M-major layout
    out = lk.fp8_gemm_nt(qa, sa, qb, sb, backend="triton")
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3


def test_saturated_operands_do_not_overflow(device):
    m, n, k = 64, 128, 512
    qa = torch.full((m, k), 448.0, device=device).to(FP8)
    qb = torch.full((n, k), -448.0, device=device).to(FP8)
    sa = torch.ones(m, k // 128, device=device)
    sb = torch.ones(n // 128, k // 128, device=device) * 1e-3
    out = lk.fp8_gemm_nt(qa, sa, qb, sb, backend="triton")
    want = -448.0 * 448.0 * k * 1e-3
    assert torch.allclose(out.float(), torch.full_like(out.float(), want), rtol=1e-2)


def test_torch_backend_matches_independent_oracle(device):
    """The torch backend is the reference the other tests compare with: here it meets the float64
    oracle of tests/oracle.py instead (exact block dots; fp32 accumulation noise of at most K
    additions of 2^-24 of the absolute sum, then one bf16 rounding)."""
    qa, sa, qb, sb = gemm_operands(5, 128, 256, device)
    bias = torch.randn(128, device=device)
    for b in (None, bias):
        d = lk.fp8_gemm_nt(qa, sa, qb, sb, b, backend="torch")
        want, mag = oracle.fp8_gemm_nt(qa, sa, qb, sb, b)
        oracle.assert_rounded(d, oracle.Noisy(want, 256 * 2.0 ** -24 * mag))


def test_bad_inputs(device):
    qa, sa, qb, sb = gemm_operands(4, 128, 256, device)
    with pytest.raises(ValueError, match="K differs"):
        lk.fp8_gemm_nt(qa, sa, qb[:, :128], sb[:, :1])
    with pytest.raises(ValueError, match="multiple of 128"):
        lk.fp8_gemm_nt(qa[:, :100], sa, qb[:, :100], sb)
    with pytest.raises(TypeError, match="a must have dtype"):
        lk.fp8_gemm_nt(qa.float(), sa, qb, sb)
    with pytest.raises(ValueError, match="a_scales must be"):
        lk.fp8_gemm_nt(qa, sa[:2], qb, sb)
    with pytest.raises(ValueError, match="b_scales must be"):
        lk.fp8_gemm_nt(qa, sa, qb, sb.t())
    with pytest.raises(ValueError, match="bias must be"):
        lk.fp8_gemm_nt(qa, sa, qb, sb, torch.zeros(3, device=device))
    with pytest.raises(ValueError, match="out must be"):
        lk.fp8_gemm_nt(qa, sa, qb, sb, out=torch.empty(3, 3, dtype=torch.bfloat16, device=device))
    with pytest.raises(lk.BackendUnavailable, match="cuda"):
        lk.fp8_gemm_nt(qa.cpu(), sa.cpu(), qb.cpu(), sb.cpu(), backend="cuda")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_nan_codes_propagate(device, backend):
    """An e4m3 NaN code (0x7F / 0xFF) in A or B makes its output row / column NaN, as on the tensor
    cores (Triton's interpreter decodes it as +-480 unless the package's fix is in)."""
    qa, sa, qb, sb = gemm_operands(80, 256, 256, device)
    qa.view(torch.uint8)[1, 5] = 0x7F
    qb.view(torch.uint8)[7, 200] = 0xFF
    d = lk.fp8_gemm_nt(qa, sa, qb, sb, backend=backend)
    nan = d.isnan()
    assert nan[1].all() and nan[:, 7].all() and nan.sum() == 256 + 80 - 1


def _gemm_backends(device):
    out = ["triton"]
    if device.type == "cuda" and not lk.gemm.gemm_op.why_not(*gemm_operands(1, 128, 128, device), None,
                                                            torch.empty(0, device=device))["cuda"]:
        out.append("cuda")
    return out


@pytest.mark.parametrize("with_out", [False, True])
def test_repeat_calls_same_signature(device, with_out):
    """Fresh inputs of one signature, call after call: on a GPU the second call onwards takes the
    per-signature plan (direct launch), which must give the same results; a bf16 bias needs a
    conversion, so no plan may read it in place."""
    from ltx_kernels import gemm

    m, n, k = 70, 256, 384
    for backend in _gemm_backends(device):
        for i in range(4):
            qa, sa, qb, sb = gemm_operands(m, n, k, device)
            bias = torch.randn(n, device=device)
            if i >= 2:
                bias = bias.bfloat16()
            out = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16) if with_out else None
            d = lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend=backend)
            if with_out:
                assert d is out
            assert rel_err(d, gemm_reference(qa, sa, qb, sb, bias.float())) <= 3e-3
        if device.type == "cuda":
            key = _dispatch.signature((qa, sa, qb, sb, bias, out, backend, gemm.tuning.generation))
            assert gemm._plans.get(key) is None, "a plan kept for a bias that needed a conversion"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA streams and graphs")
def test_planned_gemm_on_side_stream_and_in_graph():
    m, n, k = 130, 384, 256
    for backend in _gemm_backends(torch.device("cuda")):
        qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
        for _ in range(2):  # the second call is planned
            lk.fp8_gemm_nt(qa, sa, qb, sb, backend=backend)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            d = lk.fp8_gemm_nt(qa, sa, qb, sb, backend=backend)
        torch.cuda.current_stream().wait_stream(side)
        assert rel_err(d, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            d = lk.fp8_gemm_nt(qa, sa, qb, sb, backend=backend)
        qa2, sa2, qb2, sb2 = gemm_operands(m, n, k, "cuda")
        for dst, src in ((qa, qa2), (sa, sa2), (qb, qb2), (sb, sb2)):
            dst.copy_(src)
        g.replay()
        torch.cuda.synchronize()
        assert rel_err(d, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="per-thread Triton state of GPU launches")
def test_gemm_from_other_threads():
    """Each backend's first call and its planned calls from threads other than the one that made
    the plan (the Triton TMA kernels take their descriptor scratch from the launching thread's
    allocator)."""
    import threading

    m, n, k = 300, 512, 512
    for backend in _gemm_backends(torch.device("cuda")):
        qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
        want = gemm_reference(qa, sa, qb, sb, None)
        got, errors = [], []

        def call():
            try:
                got.append(lk.fp8_gemm_nt(qa, sa, qb, sb, backend=backend))
            except Exception as e:  # reported below, with the backend
                errors.append(e)

        for _ in range(3):
            t = threading.Thread(target=call)
            t.start()
            t.join()
        torch.cuda.synchronize()
        assert not errors, (backend, errors)
        assert all(rel_err(d, want) <= 3e-3 for d in got), backend


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (64, 2048, 2048), (256, 4096, 4096), (512, 4096, 4096),
                                   (16384, 4096, 4096), (200, 2176, 7168), (128, 4096, 512), (64, 128, 640),
                                   (64, 1024, 4096), (256, 2176, 7168)])
def test_sm90_split_k_choice(m, n, k):
    """Host-side choice (no GPU needed): a power of two dividing K / 128, every slice >= 4 K blocks,
    all slices in one wave, none where the tiles fill the GPU."""
    sms = 132
    cfg = gemm.sm90_tile_config(m, n, sms, k)
    s = gemm.sm90_split_k(m, n, k, cfg, sms)
    units = -(-m // cfg[0]) * -(-(-(-n // cfg[1])) // cfg[2])
    kb = k // 128
    assert s >= 1 and s & (s - 1) == 0 and kb % s == 0
    if s > 1:
        assert kb // s >= 4 and units * s <= sms // cfg[2]
    if units * 2 > sms // cfg[2]:
        assert s == 1


@pytest.mark.parametrize("m,n,k,splits", [(256, 4096, 4096, 2), (512, 4096, 4096, 1), (256, 2176, 7168, 2),
                                          (64, 4096, 4096, 4)])
def test_sm90_split_k_follows_the_probes(m, n, k, splits):
    """The counts measured fastest for the 128x128 tile (CUDA-graph replays): at 256x4096x4096 the
    workspace's reduction cost more than the halved K loop saved on the H200, and pair-K (no
    workspace) ran 1.02-1.04x unsplit on an H100 (bench/results/2026-12-07-h100-sm90-pair-k-on-main);
    at 256x2176x7168 (34 tiles, 56 K blocks) two slices win (bench/results/2026-12-04-h200-sm90-unroll-ahead,
    the workspace; pair-K 1.33-1.37x unsplit on the H100); at 64x4096x4096 (32 tiles) four slices ran
    128 TFLOP/s against 98 unsplit (bench/results/2026-12-03-h200-sm90-splitk, the kernel before the
    turns were removed)."""
    assert gemm.sm90_split_k(m, n, k, (128, 128, 1), 132) == splits


@pytest.mark.parametrize("m,n,k,cfg,splits", [(128, 4096, 4096, (128, 64, 1), 2), (256, 2048, 8192, (128, 64, 1), 2),
                                              (128, 2176, 7168, (128, 64, 1), 2), (256, 4096, 4096, (128, 64, 1), 1)])
def test_sm90_split_k_takes_pair_k_where_it_measured_faster(m, n, k, cfg, splits):
    """Two slices in 2-CTA clusters against the host's tile unsplit, CUDA graphs on an H100
    (bench/results/2026-12-07-h100-sm90-pair-k-on-main): 128x4096x4096 1.22x, 256x2048x8192 1.47x,
    128x2176x7168 1.43x; 256x4096x4096, whose 128 tiles of 128x64 fill a wave, has no room for the
    pairs."""
    assert gemm.sm90_split_k(m, n, k, cfg, 132) == splits
    assert gemm.sm90_split_k(m, n, k, cfg, 132, pair_ctas=0) == (1 if (m, n) == (128, 4096) else splits)


@pytest.mark.parametrize("m,n,k,cfg", [(32768, 4096, 4096, (256, 128, 1)), (8192, 16384, 4096, (256, 128, 1)),
                                       (32768, 16384, 4096, (256, 128, 1)), (32768, 4096, 16384, (192, 128, 1)),
                                       (8192, 8192, 2048, (256, 128, 1)), (32768, 8192, 2048, (256, 128, 1)),
                                       (8192, 4096, 16384, (256, 128, 1))])
def test_sm90_tile_config_by_cycles_picks_the_fewest_cycles(m, n, k, cfg, monkeypatch):
    """Cycles alone (no factor for the clock under load): at each shape of
    bench/results/2026-12-06-h100-sm90-tiles-and-small-m/tiles_ncu_cycles_run*.txt (two runs) the
    host picks the whole-ring config that took the fewest cycles in both (256x128x1 0.962-0.997 of
    192x128x1's cycles; at 32768x4096x16384 1.017-1.018)."""
    monkeypatch.setattr(gemm, "SM90_CLUSTER_UNDER_LOAD", 1.0)
    assert gemm.sm90_tile_config(m, n, 132, k) == cfg


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (8192, 4096, 4096), (8192, 4096, 16384), (8192, 16384, 4096),
                                   (32768, 4096, 4096), (32768, 4096, 16384), (32768, 16384, 4096),
                                   (8192, 2048, 2048), (8192, 8192, 2048), (16384, 2048, 8192), (32768, 8192, 2048),
                                   (16384, 6144, 4096)])
def test_sm90_tile_config_takes_the_cluster_in_multi_wave_grids(m, n, k):
    """At the twelve shapes of bench/results/2026-12-06-h100-sm90-2cta-beside-host-picks where the
    2-CTA grid runs 4 or more waves, sustained, it ran faster than the cycle model predicts against
    the one-CTA pick (1.020-1.133x; 0.989-1.085x the pick's throughput)."""
    assert gemm._sm90_waves(m, n, (256, 128, 2), 132) >= gemm.SM90_CLUSTER_MIN_WAVES
    assert gemm.sm90_tile_config(m, n, 132, k) == (256, 128, 2)


@pytest.mark.parametrize("m,n,k", [(1024, 4096, 4096), (2048, 4096, 4096), (3000, 2176, 7168)])
def test_sm90_tile_config_keeps_one_cta_in_grids_of_few_waves(m, n, k):
    """Where the 2-CTA grid runs one or two waves it lost to 256x128x1 in the same runs (sustained
    0.944 / 0.998 / 0.977, burst 0.982 / 0.972 / 0.956)."""
    assert gemm.sm90_tile_config(m, n, 132, k) == (256, 128, 1)


def test_sm90_cluster_factor_needs_the_whole_ring():
    """The load factor is the whole-ring loop's measurement: K blocks not a multiple of the ring
    depth (the stream loop) keep the flat rates, where 256x128x1 leads."""
    assert gemm.sm90_tile_config(8192, 4096, 132, 4096 + 128) == (256, 128, 1)


@pytest.mark.parametrize("m,n,k,cfg,splits", [(128, 4096, 4096, (128, 64, 1), 2), (256, 4096, 4096, (128, 64, 1), 1),
                                              (384, 4096, 4096, (128, 128, 1), 1), (512, 4096, 4096, (128, 128, 1), 1),
                                              (256, 2176, 7168, (128, 128, 1), 2), (512, 2048, 8192, (128, 64, 1), 1),
                                              (384, 2176, 7168, (128, 64, 1), 1)])
def test_sm90_tile_config_at_small_m_picks_the_fastest(m, n, k, cfg, splits):
    """Small M, burst (bench/results/2026-12-04-h200-sm90-2cta-and-128x64): 128x64 where 128x128
    leaves half the SMs idle, 128x128 where its tiles fill about a wave. Pair-K (two slices in
    2-CTA clusters, CUDA graphs on an H100, bench/results/2026-12-07-h100-sm90-pair-k-on-main)
    where the pick leaves SMs idle: 128x64 in pairs at 128x4096x4096 (1.22x 128x64 whole), 128x128
    in pairs at 256x2176x7168 (1.13-1.15x); not where 128x64 fills most of a wave (256x4096x4096,
    384x2176x7168, 512x2048x8192: 0.87-1.00x)."""
    assert gemm.sm90_tile_config(m, n, 132, k) == cfg
    assert gemm.sm90_split_k(m, n, k, cfg, 132) == splits
    if splits == 2:  # without pairs (no cluster fits), the workspace model decides alone
        assert gemm.sm90_tile_config(m, n, 132, k, pair_ctas=0) == (128, 64, 1)


def test_sm90_tile_rate_whole_ring_only_where_k_divides():
    whole, any_k = gemm.sm90_tile_rate((192, 128, 1), 32), gemm.SM90_TILES[(192, 128, 1)]
    assert whole > any_k
    assert gemm.sm90_tile_rate((192, 128, 1), 30) == any_k
    assert gemm.sm90_tile_rate((192, 128, 1), None) == any_k
    assert gemm.sm90_tile_rate((128, 128, 1), 32) == gemm.SM90_TILES[(128, 128, 1)]


def test_sm90_whole_ring_rates_weigh_the_tile_boundary_by_k():
    """Whole-ring configs are costed as K blocks x c + t cycles a unit: 192x128x1 stays at its
    measured rate, and 256x128x1's lead over it (the cheaper boundary) shrinks as K grows."""
    rate = gemm.sm90_tile_rate
    assert rate((192, 128, 1), 16) == pytest.approx(rate((192, 128, 1), 128))
    lead = [rate((256, 128, 1), kb) / rate((192, 128, 1), kb) for kb in (16, 32, 64, 128)]
    assert lead == sorted(lead, reverse=True) and lead[-1] > 1.0
    c, t = gemm.SM90_WHOLE_RING[(256, 128, 1)]
    c2, t2 = gemm.SM90_WHOLE_RING[(192, 128, 1)]
    assert lead[1] == pytest.approx((256 * 128 / (32 * c + t)) / (192 * 128 / (32 * c2 + t2)))


def test_config_too_big_for_the_gpu_shrinks(device, monkeypatch):
    """A config that does not fit the GPU's shared memory (Triton's OutOfResources at compile time)
    is retried with fewer stages, then 64x64 tiles; the fitting one is remembered."""
    import triton

    prepare()
    from ltx_kernels.triton import fp8_gemm as kg

    real = kg._launch
    tried = []

    def launch(a, sa, b, sb, bias, d, cfg):
        tried.append(cfg)
        if cfg["BLOCK_N"] > 64:
            raise triton.runtime.OutOfResources(300000, 101376, "shared memory")
        return real(a, sa, b, sb, bias, d, cfg)

    monkeypatch.setattr(kg, "_launch", launch)
    monkeypatch.setattr(kg, "_shrunk", {})
    qa, sa, qb, sb = gemm_operands(70, 256, 256, device)
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "USE_TMA": False}
    d = torch.full((70, 256), float("nan"), device=device, dtype=torch.bfloat16)
    kg.fp8_gemm_nt(qa, sa, qb, sb, None, d, cfg=big)
    assert [c["num_stages"] for c in tried] == [4, 3, 2, 2] and tried[-1]["BLOCK_N"] == 64
    assert rel_err(d, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3
    tried.clear()
    kg.fp8_gemm_nt(qa, sa, qb, sb, None, d, cfg=big)
    assert len(tried) == 1 and tried[0]["BLOCK_N"] == 64


@pytest.mark.parametrize("kb", [1, 3, 4, 5, 32])
@pytest.mark.parametrize("layout", ["contiguous", "k_major", "offset_base", "expanded"])
def test_sm90_weight_scales_layout(kb, layout):
    """The SM90 kernel reads B's scales with TMA (unit K-block stride, row stride a multiple of 4,
    16-byte aligned base). Layouts it can read pass through (no copy per call); any other is copied
    into one it can, same values."""
    nb = 3
    sb = torch.rand(nb, kb) + 0.5
    if layout == "k_major":
        sb = sb.t().contiguous().t()
    elif layout == "offset_base":
        sb = torch.cat([torch.zeros(1), sb.flatten()])[1:].view(nb, kb)
    elif layout == "expanded":  # one row of scales for every column block: row stride 0
        sb = sb[:1].expand(nb, kb)
    tma = gemm._tma_weight_scales(sb)
    assert torch.equal(tma, sb)
    assert tma.stride(1) == 1 or kb == 1
    assert tma.stride(0) % 4 == 0 and tma.data_ptr() % 16 == 0
    readable = layout == "contiguous" and kb % 4 == 0
    assert (tma is sb) == readable


@pytest.mark.parametrize("m", [1, 5, 130])
@pytest.mark.parametrize("layout", ["m_major", "row_major", "odd_k_stride", "offset_base", "expanded"])
def test_sm90_activation_scales_layout(m, layout):
    """A's scales as the SM90 kernel's TMA reads them: M-major, K-block stride a multiple of 4 and
    at least M, 16-byte aligned base (what quantize_blockwise writes); others are copied."""
    from ltx_kernels import reference as ref
    kb = 3
    sa = torch.rand(m, kb) + 0.5
    if layout == "m_major":
        view = ref.empty_aligned_scales(m, kb, "cpu")
    elif layout == "row_major":
        view = torch.empty(m, kb)
    elif layout == "odd_k_stride":
        view = torch.empty(kb, m + 1).t()[:m]
    elif layout == "offset_base":
        view = torch.empty(kb * ref.align4(m) + 1)[1:].view(kb, ref.align4(m)).t()[:m]
    else:  # one column of scales for every K block: K-block stride 0
        view = sa[:, :1].expand(m, kb)
    if layout != "expanded":
        view.copy_(sa)
    tma = gemm._tma_scales(view)
    assert torch.equal(tma, view)
    assert (m == 1 or tma.stride(0) == 1) and tma.stride(1) % 4 == 0 and tma.stride(1) >= m
    assert tma.data_ptr() % 16 == 0
    assert (tma is view) == (layout == "m_major" or (layout == "odd_k_stride" and (m + 1) % 4 == 0))


def test_forced_k_slices_must_divide_k(monkeypatch):
    monkeypatch.setenv("LTX_KERNELS_SM90_TILE", "128,128,1,2")
    gemm._forced.cache_clear()
    try:
        assert gemm.sm90_split_k(256, 4096, 4096, (128, 128, 1), 132) == 2
        with pytest.raises(ValueError, match="LTX_KERNELS_SM90_TILE: 2 K slices do not divide .* 3"):
            gemm.sm90_split_k(256, 4096, 384, (128, 128, 1), 132)
    finally:
        gemm._forced.cache_clear()


def test_every_shipped_config_is_taken(monkeypatch, tmp_path):
    """The H200's shipped GEMM records (persistent or not) pass the cache's staleness check."""
    from ltx_kernels import tuning
    from ltx_kernels.triton import fp8_gemm

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "device_name", lambda device=None: "NVIDIA H200")
    shipped, _ = tuning.tables("NVIDIA H200")
    records = {k: r for k, r in shipped.items() if k.startswith("fp8_gemm_nt|")}
    assert len(records) > 20
    tuning._memory.clear()
    try:
        for entry, rec in records.items():
            n, k, m = (int(v) for v in entry.split("|")[1].split(","))
            for tma in (True, False):
                tuning._choices.clear()
                got = tuning.choose("fp8_gemm_nt", (n, k, m), fp8_gemm.heuristic(m, n, k, tma),
                                    lambda: fp8_gemm.candidates(m, tma))
                assert got == rec["config"], entry
    finally:
        tuning._memory.clear()
        tuning._choices.clear()
