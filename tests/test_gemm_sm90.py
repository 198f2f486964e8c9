"""The SM90 CUDA GEMM (csrc/gemm_sm90) against the fp32 reference of the dequantized operands."""
import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _ext

from helpers import gemm_operands, gemm_reference, rel_err

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or _ext.load("_C_gemm_sm90")[0] is None
    or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 GPU and the _C_gemm_sm90 extension")


@pytest.mark.parametrize("m", [1, 64, 129, 3000, 20000])
@pytest.mark.parametrize("n,k", [(2176, 7168), (384, 640), (4096, 4096)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_shapes(m, n, k, with_bias):
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda", zero_blocks=True)
    bias = torch.randn(n, device="cuda") if with_bias else None
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
    lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend="cuda")
    assert torch.isfinite(out.float()).all(), "output not fully written"
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


def test_auto_picks_cuda_and_strided_scales():
    qa, sa, qb, sb = gemm_operands(300, 512, 1024, "cuda")
    assert lk.gemm.gemm_op.select("auto", qa, sa, qb, sb, None, qa.new_empty(0)).name == "cuda"
    sa_rowmajor = sa.contiguous()  # [M, K/128] row-major instead of the M-major layout
    out = lk.fp8_gemm_nt(qa, sa_rowmajor, qb, sb)
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3


@pytest.mark.parametrize("layout", ["odd_stride", "unaligned_base", "k_major_m1"])
def test_scales_the_tma_cannot_read_are_copied(layout):
    # the kernel reads sa with TMA (M-major, 16-byte aligned); other layouts go through a copy
    m, n, k = (1 if layout == "k_major_m1" else 257), 256, 512
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
    if layout == "odd_stride":
        view = torch.full((k // 128, m + 1), float("nan"), device="cuda").t()[:m]
    elif layout == "unaligned_base":
        view = torch.full((k // 128, 260), float("nan"), device="cuda").t()[1:m + 1]  # stride 260: only the base is off
    else:
        view = torch.full((m, k // 128), float("nan"), device="cuda")
    view.copy_(sa)
    out = lk.fp8_gemm_nt(qa, view, qb, sb, backend="cuda")
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3


@pytest.mark.parametrize("layout", ["k_major", "unaligned_base", "row_stride_5"])
def test_weight_scales_the_tma_cannot_read_are_copied(layout):
    # the kernel reads sb with TMA (unit K-block stride, row stride a multiple of 4, 16-byte aligned);
    # other layouts go through a copy. K / 128 = 5: the 16-byte runs of K blocks straddle rows.
    m, n, k = 200, 384, 640
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
    sb = sb * torch.rand_like(sb).add(0.5)
    if layout == "k_major":
        view = torch.full((k // 128, n // 128), float("nan"), device="cuda").t()
    elif layout == "unaligned_base":
        view = torch.full((n // 128, 9), float("nan"), device="cuda")[:, 1:1 + k // 128]  # row stride 9
    else:
        view = torch.full((n // 128, k // 128), float("nan"), device="cuda")
    view.copy_(sb)
    assert lk.gemm._tma_weight_scales(view) is not view
    out = lk.fp8_gemm_nt(qa, sa, qb, view, backend="cuda")
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3
    mod = _ext.load("_C_gemm_sm90")[0]
    with pytest.raises(RuntimeError, match="sb must have a unit K-block stride"):
        mod.fp8_gemm_nt(qa, sa, qb, view, None, out, 128, 128, 1, 1)


def test_saturated_operands_do_not_overflow():
    m, n, k = 128, 256, 4096
    qa = torch.full((m, k), 448.0, device="cuda").to(torch.float8_e4m3fn)
    qb = torch.full((n, k), -448.0, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.ones(m, k // 128, device="cuda")
    sb = torch.ones(n // 128, k // 128, device="cuda") * 1e-3
    out = lk.fp8_gemm_nt(qa, sa, qb, sb, backend="cuda")
    torch.testing.assert_close(out.float(), torch.full((m, n), -448.0 * 448.0 * k * 1e-3, device="cuda"),
                               rtol=1e-2, atol=0)


@pytest.mark.parametrize("m,n,k", [(1000, 4096, 2048), (64, 1024, 4096), (128, 4096, 4096)])
def test_cuda_graph_capture(m, n, k):
    """Also at small M, where the public path takes split-K: at 64x1024 more than two slices (a
    workspace from the caching allocator and a second kernel), at 128x4096 two in 2-CTA clusters
    (pair-K); 1000x4096 has enough tiles for every SM, so no split."""
    cfg, splits = lk.gemm.sm90_plan(m, n, k)
    if m == 1000:
        assert splits == 1
    elif m == 64:
        assert splits > 2
    else:
        units = -(-m // cfg[0]) * -(-n // cfg[1]) * 2
        assert splits == 2 and cfg[2] == 1 and units <= _ext.load("_C_gemm_sm90")[0].pair_k_ctas(*cfg)
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
    bias = torch.randn(n, device="cuda")
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend="cuda")
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


@pytest.mark.parametrize("cfg", sorted(lk.gemm.SM90_TILES), ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("m,n,k", [(1, 384, 640), (100, 384, 256), (129, 4096, 4096), (3000, 2176, 7168),
                                   (20000, 640, 256), (1000, 128, 384), (20000, 640, 512), (700, 1152, 1536)])
def test_tile_configs(cfg, m, n, k):
    """Every instantiation, called directly: N not a multiple of 192, tiles straddling two
    128-column scale blocks (192), an odd number of column tiles (the cluster's second CTA has no
    tile), row blocks whose second half lies wholly past M (M = 100 with 256-row tiles). K / 128 of
    4, 12, 32 and 56 take the whole-ring loop of the 4-stage configs (one and several revolutions,
    several tiles a CTA), 2, 3 and 5 their stream loop; 128x128's two accumulators see odd and even
    block counts a CTA."""
    mod = _ext.load("_C_gemm_sm90")[0]
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda", zero_blocks=True)
    sb = sb * torch.rand_like(sb).add(0.5)  # distinct scales per 128-column block
    bias = torch.randn(n, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod.fp8_gemm_nt(qa, sa, qb, lk.gemm._tma_weight_scales(sb), bias, out, *cfg)
    assert torch.isfinite(out.float()).all(), "output not fully written"
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3


@pytest.mark.parametrize("cfg", [(128, 128, 1), (256, 128, 1), (192, 128, 1), (128, 192, 1), (128, 128, 2),
                                 (128, 64, 1)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("splits", [2, 4])
@pytest.mark.parametrize("m,n,k,with_bias", [(1, 384, 1024, True), (100, 640, 2048, False), (257, 2176, 1024, True),
                                             (200, 640, 1536, True), (129, 512, 4096, False),
                                             (1000, 2176, 1024, True)])
def test_split_k(cfg, splits, m, n, k, with_bias):
    """K cut into slices, into a column slice of a wider output: only its columns are written, all of
    them. Two slices of one-CTA tiles whose units all fit at once meet in 2-CTA clusters (pair-K; at
    200 x 640 with every such tile, never at 1000 x 2176: test_split_k_takes_both_paths);
    otherwise, and with four slices, fp32 partials go through the workspace and the reduction
    kernel adds the bias and rounds. K = 1024 and 4096: slices of fewer K blocks than the
    128-row tiles' ring holds, and of several turns of it; K = 1536 (6 K blocks a slice) runs
    256x128 and 192x128 in their any-K loop."""
    mod = _ext.load("_C_gemm_sm90")[0]
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda", zero_blocks=True)
    sb = sb * torch.rand_like(sb).add(0.5)
    bias = torch.randn(n, device="cuda") if with_bias else None
    big = torch.full((m, n + 256), 7.0, device="cuda", dtype=torch.bfloat16)
    out = big[:, 128:128 + n]
    out.fill_(float("nan"))
    mod.fp8_gemm_nt(qa, sa, qb, lk.gemm._tma_weight_scales(sb), bias, out, *cfg, splits)
    assert torch.isfinite(out.float()).all(), "output not fully written"
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, bias)) <= 3e-3
    assert (big[:, :128] == 7).all() and (big[:, 128 + n:] == 7).all()


@pytest.mark.parametrize("cfg", [(128, 128, 1), (256, 128, 1), (192, 128, 1), (128, 64, 1)],
                         ids=lambda c: "x".join(map(str, c)))
def test_split_k_takes_both_paths(cfg):
    """test_split_k's two slices run pair-K at 200 x 640 (every unit resident at once) and the
    workspace at 1000 x 2176; tiles whose ring cannot hold the peer's partial, and 2-CTA tiles,
    have no pair-K."""
    mod = _ext.load("_C_gemm_sm90")[0]
    ctas = mod.pair_k_ctas(*cfg)
    assert ctas >= 2 and ctas % 2 == 0

    def units(m, n):
        return -(-m // cfg[0]) * -(-n // cfg[1]) * 2
    assert units(200, 640) <= ctas < units(1000, 2176)
    assert mod.pair_k_ctas(128, 192, 1) == 0 and mod.pair_k_ctas(256, 128, 2) == 0


def test_whole_ring_depth_matches_the_host_model():
    """The host's rate model assumes the whole-ring loop where K / 128 divides by SM90_RING_DEPTH:
    the ring depth of those configs as built."""
    mod = _ext.load("_C_gemm_sm90")[0]
    for cfg in lk.gemm.SM90_WHOLE_RING:
        assert mod.stages(*cfg) == lk.gemm.SM90_RING_DEPTH, cfg


def test_split_k_bad_count_is_refused():
    mod = _ext.load("_C_gemm_sm90")[0]
    qa, sa, qb, sb = gemm_operands(64, 128, 384, "cuda")
    out = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="splits must divide"):
        mod.fp8_gemm_nt(qa, sa, qb, sb, None, out, 128, 128, 1, 2)  # 3 K blocks


@pytest.mark.parametrize("cfg", [(128, 96, 1), (192, 128, 2), (64, 64, 1)])
def test_unsupported_tile_config_is_refused(cfg):
    """A (block_m, block_n, cluster) the extension was not built for: an error naming the ones it has."""
    mod = _ext.load("_C_gemm_sm90")[0]
    qa, sa, qb, sb = gemm_operands(64, 128, 384, "cuda")
    out = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"unsupported tile config.*\(128,64,1\)"):
        mod.fp8_gemm_nt(qa, sa, qb, sb, None, out, *cfg, 1)


def test_output_view_with_row_stride():
    """out a column slice of a wider tensor (row stride != N): only its columns are written."""
    qa, sa, qb, sb = gemm_operands(300, 256, 512, "cuda")
    big = torch.full((300, 512), 7.0, device="cuda", dtype=torch.bfloat16)
    out = big[:, 128:384]
    lk.fp8_gemm_nt(qa, sa, qb, sb, out=out, backend="cuda")
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3
    assert (big[:, :128] == 7).all() and (big[:, 384:] == 7).all()


def test_misaligned_output_falls_back_with_reason():
    qa, sa, qb, sb = gemm_operands(64, 128, 128, "cuda")
    big = torch.empty(64, 136, device="cuda", dtype=torch.bfloat16)
    out = big[:, 4:132]  # 8-byte aligned base
    why = lk.gemm.gemm_op.why_not(qa, sa, qb, sb, None, out)["cuda"]
    assert any("16-byte" in r for r in why), why
    lk.fp8_gemm_nt(qa, sa, qb, sb, out=out)  # auto takes Triton
    assert rel_err(out, gemm_reference(qa, sa, qb, sb, None)) <= 3e-3


def test_auto_follows_the_measured_backend_choice(tmp_path, monkeypatch):
    """A warmup record 'triton is faster at this (N, K, M bucket)' moves auto to Triton there (the
    cached choice is re-read once a new record is stored); an explicit backend='cuda' still runs."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    m, n, k = 40, 384, 640  # a shape no shipped record covers
    qa, sa, qb, sb = gemm_operands(m, n, k, "cuda")
    key = (n, k, tuning.m_bucket(m))
    table = tuning._table(tuning.device_name(qa.device))
    entry = tuning.entry_key(lk.gemm.BACKEND_CHOICE, key)
    try:
        assert lk.gemm.gemm_op.select("auto", qa, sa, qb, sb, None, qa.new_empty(0)).name == "cuda"
        tuning.store(lk.gemm.BACKEND_CHOICE, key, {"backend": "triton"}, 0.01, qa.device)
        assert lk.gemm.gemm_op.select("auto", qa, sa, qb, sb, None, qa.new_empty(0)).name == "triton"
        want = gemm_reference(qa, sa, qb, sb, None)
        assert rel_err(lk.fp8_gemm_nt(qa, sa, qb, sb), want) <= 3e-3
        assert rel_err(lk.fp8_gemm_nt(qa, sa, qb, sb, backend="cuda"), want) <= 3e-3
    finally:
        table.pop(entry, None)
        lk._dispatch.forget_choices()
        tuning.generation += 1
