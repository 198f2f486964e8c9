"""GPU benchmarks of every kernel at LTX-2 sizes, with the anchors measured in the same run.

    pytest bench --benchmark-json=results.json           # run
    pytest bench --benchmark-save=base                   # save a baseline
    pytest bench --benchmark-compare --benchmark-compare-fail=median:10%   # fail on a >10% regression
"""
import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import reference as ref

BF16 = torch.bfloat16
DEV = "cuda"


def _compiled(fn):
    return torch.compile(fn, dynamic=False)


@pytest.mark.parametrize("t", [8192, 32768])
@pytest.mark.parametrize("h", [2048, 4096, 8192])
@pytest.mark.parametrize("out_fp8", [False, True])
def test_split_rope(rec, t, h, out_fp8):
    nh = 32
    x = torch.randn(1, t, h, device=DEV, dtype=BF16)
    c = torch.randn(1, t, nh, h // nh // 2, device=DEV, dtype=BF16).swapaxes(1, 2)
    s = torch.randn(1, t, nh, h // nh // 2, device=DEV, dtype=BF16).swapaxes(1, 2)
    w = torch.rand(h, device=DEV, dtype=BF16)
    nbytes = x.numel() * 2 + c.numel() * 2 * 2 + x.numel() * (1 if out_fp8 else 2)
    anchors = {"eager": lambda: ref.rms_norm_split_rope(x, c, s, w, out_fp8)}
    if h == 4096:  # torch.compile anchors cost minutes of compile: the main size only
        anchors["compile"] = _compiled(lambda: ref.rms_norm_split_rope(x, c, s, w, out_fp8))
    rec.measure(lambda: lk.rms_norm_split_rope(x, c, s, w, out_fp8), nbytes=nbytes, anchors=anchors,
                op="rms_norm_split_rope", shape=f"T={t} h={h}", out="fp8" if out_fp8 else "bf16")


@pytest.mark.parametrize("t", [8192, 32768])
@pytest.mark.parametrize("h", [4096])
@pytest.mark.parametrize("out_fp8", [False, True])
def test_interleaved_rope(rec, t, h, out_fp8):
    x = torch.randn(1, t, h, device=DEV, dtype=BF16)
    c = torch.randn(1, t, h, device=DEV, dtype=BF16)
    s = torch.randn(1, t, h, device=DEV, dtype=BF16)
    w = torch.rand(h, device=DEV, dtype=BF16)
    nbytes = x.numel() * 2 * 3 + x.numel() * (1 if out_fp8 else 2)
    comp = _compiled(lambda: ref.rms_norm_rope(x, c, s, w, out_fp8))
    rec.measure(lambda: lk.rms_norm_rope(x, c, s, w, out_fp8), nbytes=nbytes,
                anchors={"eager": lambda: ref.rms_norm_rope(x, c, s, w, out_fp8), "compile": comp},
                op="rms_norm_rope", shape=f"T={t} h={h}", out="fp8" if out_fp8 else "bf16")


@pytest.mark.parametrize("kind", ["pack", "unpack"])
def test_fp6(rec, kind):
    m, n = 16384, 8192
    x = torch.randint(0, 256, (m, n), device=DEV, dtype=torch.uint8) & 0x9F
    p = ref.fp6_pack(x)
    nbytes = m * n * 1.75
    if kind == "pack":
        rec.measure(lambda: lk.fp6_pack(x), nbytes=nbytes, anchors={"eager": lambda: ref.fp6_pack(x)},
                    op="fp6_pack", shape=f"{m}x{n}")
    else:
        rec.measure(lambda: lk.fp6_unpack(p, n), nbytes=nbytes, anchors={"eager": lambda: ref.fp6_unpack(p, n)},
                    op="fp6_unpack", shape=f"{m}x{n}")


@pytest.mark.parametrize("op", ["quantize_blockwise", "quantize_blockwise_gelu", "quantize_adanorm", "gated_attention",
                                "quantize_rms_fma"])
@pytest.mark.parametrize("k", [4096])
def test_quantize_family(rec, op, k):
    t = 32768
    x = torch.randn(1, t, k, device=DEV, dtype=BF16)
    sc = torch.randn(1, 1, k, device=DEV, dtype=BF16) * 0.1
    sh = torch.randn(1, 1, k, device=DEV, dtype=BF16) * 0.1
    out_bytes = x.numel() + x.numel() / 128 * 4
    if op in ("quantize_blockwise", "quantize_blockwise_gelu"):
        gelu = op.endswith("gelu")
        fn = lambda: lk.quantize_blockwise(x, gelu=gelu)  # noqa: E731
        rfn = lambda: ref.quantize_blockwise(x, gelu=gelu)  # noqa: E731
        nbytes = x.numel() * 2
    elif op == "quantize_adanorm":
        fn = lambda: lk.quantize_adanorm(x, sc, sh)  # noqa: E731
        rfn = lambda: ref.quantize_adanorm(x, sc, sh)  # noqa: E731
        nbytes = x.numel() * 2
    elif op == "gated_attention":
        lg = torch.randn(1, t, 32, device=DEV, dtype=BF16)
        fn, rfn, nbytes = (lambda: lk.gated_attention(x, lg)), (lambda: ref.gated_attention(x, lg)), x.numel() * 2
    else:
        y = torch.randn_like(x)
        g = torch.randn(1, 1, k, device=DEV, dtype=BF16)
        fn = lambda: lk.quantize_rms_fma(x, y, g)  # noqa: E731  (in place: x keeps changing, as in the model)
        rfn = lambda: ref.quantize_rms_fma(x, y, g)  # noqa: E731
        nbytes = x.numel() * 2 * 3  # x read+written, y read
    rec.measure(fn, nbytes=nbytes + out_bytes, anchors={"eager": rfn, "compile": _compiled(rfn)},
                op=op, shape=f"[1,{t},{k}]")


@pytest.mark.parametrize("kind", ["activations", "weights"])
def test_dequantize(rec, kind):
    m, k = (32768, 4096) if kind == "activations" else (16384, 4096)
    x = torch.randn(m, k, device=DEV, dtype=BF16)
    q, s = lk.quantize_blockwise(x) if kind == "activations" else lk.quantize_weights_blockwise(x)
    nbytes = q.numel() * (1 + 2) + s.numel() * 4
    rec.measure(lambda: lk.dequantize_blockwise(q, s), nbytes=nbytes,
                anchors={"eager": lambda: ref.dequantize_blockwise(q, s)}, op="dequantize_blockwise",
                shape=f"{kind} [{m},{k}]")


def test_quantize_weights(rec):
    n, k = 16384, 4096
    w = torch.randn(n, k, device=DEV, dtype=BF16)
    nbytes = w.numel() * (2 + 1) + (n // 128) * (k // 128) * 4
    rec.measure(lambda: lk.quantize_weights_blockwise(w), nbytes=nbytes,
                anchors={"eager": lambda: ref.quantize_weights_blockwise(w)}, op="quantize_weights_blockwise",
                shape=f"[{n},{k}]")


def _scaled_mm_anchor(qa, sa, qb, sb):
    """cuBLASLt blockwise _scaled_mm (1x128 x 128x128); the scale layouts it accepts vary by torch
    version, so try the known ones and keep the first that runs and agrees with the reference."""
    want = ref.fp8_gemm_nt(qa[:256], sa[:256].contiguous(), qb, sb).float()
    m = qa.shape[0]
    sa_m = sa.t().contiguous().t()  # [M, K/128] M-major, exact M stride
    for sa_c in (sa_m, sa):
        for sb_c in (sb.t().contiguous(), sb.t(), sb, sb.contiguous()):
            try:
                d = torch._scaled_mm(qa, qb.t(), sa_c, sb_c, out_dtype=BF16)
            except Exception:
                continue
            if ((d[:256].float() - want).norm() / want.norm()) < 1e-2:
                return lambda sa_c=sa_c, sb_c=sb_c: torch._scaled_mm(qa, qb.t(), sa_c, sb_c, out_dtype=BF16)
    raise RuntimeError(f"no blockwise _scaled_mm layout accepted for M={m}")


GEMM_SHAPES = [(16384, 4096, 4096), (16384, 16384, 4096), (16384, 4096, 16384), (4096, 4096, 4096),
               (1024, 4096, 4096), (16384, 2048, 2048), (3000, 4096, 4096), (3000, 2176, 7168)]


# small M (audio / text tokens): the SM90 kernel cuts K into slices there; "auto" takes the backend
# the warmup measured faster; kernels this short are compared as graph replays (anchors too)
SMALL_M_GEMM_SHAPES = [(64, 4096, 4096), (256, 4096, 4096), (64, 2048, 2048), (256, 2048, 2048),
                       (256, 2048, 8192), (256, 2176, 7168)]


@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("m,n,k", GEMM_SHAPES)
def test_fp8_gemm(rec, backend, m, n, k):
    _bench_gemm(rec, backend, m, n, k)


@pytest.mark.parametrize("backend", ["auto", "triton", "cuda"])
@pytest.mark.parametrize("m,n,k", SMALL_M_GEMM_SHAPES)
def test_fp8_gemm_small_m(rec, backend, m, n, k):
    _bench_gemm(rec, backend, m, n, k, graph_anchors=True)


def _bench_gemm(rec, backend, m, n, k, graph_anchors=False):
    qa, sa = lk.quantize_blockwise(torch.randn(m, k, device=DEV))
    qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device=DEV))
    bias = torch.randn(n, device=DEV)
    if backend == "auto":
        backend_run = lk.gemm.gemm_op.select("auto", qa, sa, qb, sb, bias, qa.new_empty(0)).name
        rec.info["auto_took"] = backend_run
    else:
        reasons = lk.gemm.gemm_op.why_not(qa, sa, qb, sb, bias, qa.new_empty(0))[backend]
        if reasons:
            pytest.skip("; ".join(reasons))
        backend_run = backend

    def gemm(out=None):
        return lk.fp8_gemm_nt(qa, sa, qb, sb, bias, out=out, backend=backend)

    if backend_run == "cuda":
        cfg, rec.info["splits"] = lk.gemm.sm90_plan(m, n, k)
        rec.info["tile"] = "x".join(map(str, cfg))
    d = gemm()
    a32 = qa.float() * ref.expand_scales(sa, m, k)
    b32 = qb.float() * ref.expand_scales(sb, n, k)
    want = a32 @ b32.t() + bias
    err = float((d.float() - want).norm() / want.norm())
    del a32, b32, want
    out = torch.empty(m, n, device=DEV, dtype=BF16)
    a16 = torch.randn(m, k, device=DEV, dtype=BF16)
    b16 = torch.randn(n, k, device=DEV, dtype=BF16)
    anchors = {"bf16_cublas": lambda: a16 @ b16.t()}
    try:
        anchors["cublas_blockwise"] = _scaled_mm_anchor(qa, sa, qb, sb)
    except Exception as e:
        rec.info["anchor_cublas_blockwise_error"] = str(e)[:200]
    rec.measure(lambda: gemm(out), flops=2.0 * m * n * k, anchors=anchors, graph_anchors=graph_anchors,
                op="fp8_gemm_nt", backend=backend if backend != "auto" else f"auto->{backend_run}",
                shape=f"{m}x{n}x{k}", rel_err=err)
    assert err <= 3e-3
