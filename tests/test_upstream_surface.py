"""The package as a drop-in for LTX-2's ``ltx-kernels``: every public name of upstream's modules,
importable from the same module path with upstream's parameters (names, order, defaults), and
ltx-core's own import lines and call patterns run and give the right results.

The surface below is a fact of upstream's API (module, name, parameters); ours may add
parameters only after upstream's and only with defaults, so every upstream call binds the same.
"""
from __future__ import annotations

import ast
import importlib
import inspect

import numpy as np
import pytest
import torch

from ltx_kernels import reference as ref

FP8 = torch.float8_e4m3fn
REQUIRED = object()

# (module, name, parameters); parameters None: a name to import, not a callable to check.
# Classes list their methods as "Class.method".
SURFACE = [
    ("ltx_kernels", "__version__", None),
    ("ltx_kernels", "All2All.__init__",
     "self, rank, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, group=None, timeout_seconds=None"),
    ("ltx_kernels", "All2All.set_rank_tokens", "self, rank_num_tokens"),
    ("ltx_kernels", "All2All.set_timeout_seconds", "self, seconds"),
    ("ltx_kernels", "All2All.send_recv_heads", "self, x, *, copy_out=False"),
    ("ltx_kernels", "All2All.gather_heads", "self, x, *, copy_out=False"),
    ("ltx_kernels", "All2All.allgather", "self, x, *, copy_out=False"),
    ("ltx_kernels", "All2All.destroy", "self"),
    ("ltx_kernels.all_to_all", "All2All", None),
    ("ltx_kernels.arch", "get_device_arch", ""),
    ("ltx_kernels.blockwise.arch", "get_device_arch", ""),
    # ltx_kernels.blockwise: upstream's __all__
    *[("ltx_kernels.blockwise", n, None) for n in (
        "BlockwiseFP6Linear", "BlockwiseFP8Linear", "blockwise_dequantize", "blockwise_quantize_adanorm_triton",
        "blockwise_quantize_rms_fma_triton", "fp6_blockwise_quantize_weights_torch", "fp6_pack_tensor",
        "fp6_unpack_tensor", "fp8_blockwise_quantize_weights_torch", "gated_attention_triton", "rms_norm_rope",
        "rms_norm_split_rope")],
    # ltx_kernels.blockwise.functional
    ("ltx_kernels.blockwise.functional", "FP8_SCALE_MAX", None),
    ("ltx_kernels.blockwise.functional", "FP6_SCALE_MAX", None),
    ("ltx_kernels.blockwise.functional", "RMSNormRope.forward", "ctx, x, weights, cos_freqs, sin_freqs, out_16bit"),
    ("ltx_kernels.blockwise.functional", "RMSNormSplitRope.forward", "ctx, x, sin_freqs, cos_freqs, weights, out_fp8"),
    ("ltx_kernels.blockwise.functional", "rms_norm_rope", "x, cos_freqs, sin_freqs, weights=None, out_fp8=False"),
    ("ltx_kernels.blockwise.functional", "rms_norm_split_rope", "x, cos_freqs, sin_freqs, weights=None, out_fp8=False"),
    ("ltx_kernels.blockwise.functional", "rms_norm_rope_cuda", "x, weights, cos_freqs, sin_freqs, out_16bit"),
    ("ltx_kernels.blockwise.functional", "rms_norm_split_rope_cuda", "x, sin_freqs, cos_freqs, weights, out_fp8"),
    ("ltx_kernels.blockwise.functional", "blockwise_quantize_weights", "w, block_size=128, scale_max=448.0"),
    ("ltx_kernels.blockwise.functional", "blockwise_quantize_torch", "x, block_size=128, scale_max=448.0"),
    ("ltx_kernels.blockwise.functional", "fp8_blockwise_quantize_weights_torch", "x, block_size=128"),
    ("ltx_kernels.blockwise.functional", "fp6_blockwise_quantize_weights_torch", "x, block_size=128"),
    ("ltx_kernels.blockwise.functional", "blockwise_dequantize", "x"),
    ("ltx_kernels.blockwise.functional", "fp6_pack_tensor", "x"),
    ("ltx_kernels.blockwise.functional", "fp6_unpack_tensor", "x, original_n"),
    ("ltx_kernels.blockwise.functional", "fp6_pack", "x"),
    ("ltx_kernels.blockwise.functional", "fp6_unpack", "x, original_n"),
    ("ltx_kernels.blockwise.functional", "blockwise_dequantize_triton", "x, scales"),
    ("ltx_kernels.blockwise.functional", "blockwise_quantize_adanorm_triton",
     "x, w, norm_scale, norm_shift, out_dtype, hd_scale"),
    ("ltx_kernels.blockwise.functional", "blockwise_quantize_rms_fma_triton", "x, y, z"),
    ("ltx_kernels.blockwise.functional", "blockwise_quantize_triton", "x"),
    ("ltx_kernels.blockwise.functional", "gated_attention_triton", "x, gate_logits, quantize=True"),
    # ltx_kernels.blockwise.linear
    ("ltx_kernels.blockwise.linear", "get_fp8_gemm_nt", ""),
    ("ltx_kernels.blockwise.linear", "blockwise_fp8_gemm", "a, b, bias, use_fast_accum"),
    ("ltx_kernels.blockwise.linear", "blockwise_fp8_gemm_fake", "a, b, bias, use_fast_accum"),
    ("ltx_kernels.blockwise.linear", "is_16bit", "x"),
    ("ltx_kernels.blockwise.linear", "BlockwiseGemmLinearFunc.forward", "ctx, a, w, bias"),
    ("ltx_kernels.blockwise.linear", "blockwise_linear_func", "a, b, bias=None"),
    *[("ltx_kernels.blockwise.linear", f"{c}.{m}", p) for c in ("BlockwiseLinear", "BlockwiseFP8Linear",
                                                                 "BlockwiseFP6Linear") for m, p in (
        ("__init__", "self, in_features, out_features, bias=True, device=None, dtype=None"),
        ("forward", "self, x"),
        ("from_linear", "linear, transform_weights=True"),
        ("fp8weight", None))],
    *[("ltx_kernels.blockwise.linear", n, None) for n in (
        "get_device_arch", "blockwise_quantize_triton", "blockwise_quantize_weights",
        "fp6_blockwise_quantize_weights_torch", "fp6_pack", "fp6_unpack")],
    # ltx_kernels.blockwise.triton_ops
    ("ltx_kernels.blockwise.triton_ops", "get_tma_aligned_size", "n, element_size"),
    ("ltx_kernels.blockwise.triton_ops", "run_quantize_kernel", "x, out_dtype=None"),
    ("ltx_kernels.blockwise.triton_ops", "run_quant_blockwise_tma_aligned", "x"),
    ("ltx_kernels.blockwise.triton_ops", "run_quant_blockwise_gelu_tma_aligned", "x"),
    ("ltx_kernels.blockwise.triton_ops", "run_quant_blockwise_norm_tma_aligned",
     "x, w, norm_scale, norm_shift, out_dtype, hd_scale"),
    ("ltx_kernels.blockwise.triton_ops", "run_quant_blockwise_rms_fma", "x, y, z"),
    ("ltx_kernels.blockwise.triton_ops", "run_rms_fma", "x, y, z"),
    ("ltx_kernels.blockwise.triton_ops", "run_gated_attention", "x, gate_logits, quantize=True"),
    ("ltx_kernels.blockwise.triton_ops", "run_blockwise_dequantize", "x, scales"),
    *[("ltx_kernels.blockwise.triton_ops", n, None) for n in (
        "rowwise_int_quantize_triton", "blockwise_quantize_adanorm_triton", "blockwise_quantize_triton",
        "blockwise_quantize_gelu_triton", "blockwise_quantize_rms_fma_triton", "rms_fma_triton",
        "gated_attention_triton", "blockwise_dequantize_triton")],
    # ltx_kernels.nvfp4 (Blackwell only; here it says it is unavailable)
    *[("ltx_kernels.nvfp4", n, None) for n in ("E2M1_MAX", "E4M3_MAX", "GLOBAL_RANGE", "REBUILD_HINT")],
    ("ltx_kernels.nvfp4", "unavailable_reason", ""),
    ("ltx_kernels.nvfp4", "is_available", ""),
    ("ltx_kernels.nvfp4", "scale_shape", "rows, k"),
    ("ltx_kernels.nvfp4", "per_tensor_decode_scale", "x"),
    ("ltx_kernels.nvfp4", "fixed_scale_one", "device"),
    ("ltx_kernels.nvfp4", "quantize_nvfp4", "x, per_tensor_scale, *, pad_16x=True, hi_first=True, variant=2"),
    ("ltx_kernels.nvfp4", "scaled_mm_nvfp4",
     "a, b, scale_a, scale_b, block_a, block_b, *, bias=None, out_dtype=bfloat16, alpha=None"),
    ("ltx_kernels.nvfp4", "dequantize_nvfp4",
     "packed, per_tensor_scale, block_scales, *, out_dtype=bfloat16, hi_first=True"),
    ("ltx_kernels.nvfp4", "linear_nvfp4", "x, weight, weight_block_scale, weight_scale, *, bias=None, "
                                          "act_scale=None, hi_first=True, out_dtype=bfloat16"),
    # ltx_kernels.vae (datacenter Blackwell only; here it says it is unavailable)
    ("ltx_kernels.vae", "OUT_SLACK_ROWS", None),
    ("ltx_kernels.vae", "na_attn_available", "device_index=0"),
    ("ltx_kernels.vae", "block_fna_available", "device_index=0"),
    ("ltx_kernels.vae", "fna_supported", "*, C, Ctx, Hidd, num_heads, kernel_size, T, H, W, tile_thw=None, "
                                         "upsample_stride=(1, 1, 1)"),
    ("ltx_kernels.vae", "na_supported", "*, num_heads, head_dim, kernel_size, T, H, W, tile_thw=None"),
    *[("ltx_kernels.vae", n, None) for n in ("pack_fused_ctx_weights", "run_block_fna_dsl", "run_na_attention",
                                             "run_na_attention_bound", "softmax_row_bound")],
    ("ltx_kernels.vae.availability", "UNSUPPORTED_MESSAGE", None),
    ("ltx_kernels.vae.availability", "gpu_supports_dsl_kernels", "device_index=0"),
]

_NAMED_DEFAULTS = {"bfloat16": torch.bfloat16}


def _parse(params: str):
    """"a, b=1, *, c=None" -> [(name, default or REQUIRED, keyword_only)]."""
    out, kw_only = [], False
    for item in _split(params):
        if item == "*":
            kw_only = True
            continue
        name, _, default = item.partition("=")
        if not default:
            out.append((name, REQUIRED, kw_only))
        else:
            out.append((name, _NAMED_DEFAULTS.get(default) if default in _NAMED_DEFAULTS
                        else ast.literal_eval(default), kw_only))
    return out


def _split(params: str):
    items, depth, cur = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        cur += ch
    if cur.strip():
        items.append(cur.strip())
    return items


def _resolve(module: str, name: str):
    obj = importlib.import_module(module)
    for part in name.split("."):
        if inspect.isclass(obj):
            raw = inspect.getattr_static(obj, part)
            # a classmethod is called bound (no cls), a property is looked up, not called
            obj = getattr(obj, part) if isinstance(raw, classmethod) else raw
        else:
            obj = getattr(obj, part)
    return obj.__func__ if isinstance(obj, staticmethod) else obj


@pytest.mark.parametrize("module,name,params", SURFACE, ids=[f"{m}:{n}" for m, n, _ in SURFACE])
def test_upstream_name_and_parameters(module, name, params):
    obj = _resolve(module, name)
    if params is None:
        return
    ours = list(inspect.signature(obj).parameters.values())
    want = _parse(params)
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in ours}
    n_pos = 0
    for wname, wdefault, kw_only in want:
        p = by_name.get(wname)
        assert p is not None, f"{module}.{name}: parameter {wname!r} missing (ours: {[q.name for q in ours]})"
        if not kw_only:
            assert positional[n_pos].name == wname, (
                f"{module}.{name}: positional parameter {n_pos} is {positional[n_pos].name!r}, upstream's is {wname!r}")
            n_pos += 1
        else:
            assert p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD), f"{module}.{name}: {wname!r} must take a keyword"
        if wdefault is not REQUIRED:
            assert p.default is not p.empty and p.default == wdefault, (
                f"{module}.{name}: {wname!r} defaults to {p.default!r}, upstream's to {wdefault!r}")
    extra = [p for p in ours if p.name not in {w[0] for w in want}
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert all(p.default is not p.empty for p in extra), (
        f"{module}.{name}: our extra parameters {[p.name for p in extra]} must have defaults")


def test_blockwise_exports_are_the_functional_objects():
    import ltx_kernels.blockwise as bw
    from ltx_kernels.blockwise import functional, linear, triton_ops

    for n in ("blockwise_dequantize", "fp6_pack_tensor", "fp6_unpack_tensor", "rms_norm_rope", "rms_norm_split_rope",
              "fp8_blockwise_quantize_weights_torch", "fp6_blockwise_quantize_weights_torch"):
        assert getattr(bw, n) is getattr(functional, n)
    for n in ("blockwise_quantize_adanorm_triton", "blockwise_quantize_rms_fma_triton", "gated_attention_triton"):
        assert getattr(bw, n) is getattr(functional, n) is getattr(triton_ops, n)
    assert bw.BlockwiseFP8Linear is linear.BlockwiseFP8Linear
    assert issubclass(bw.BlockwiseFP6Linear, linear.BlockwiseLinear)
    assert triton_ops.rowwise_int_quantize_triton is triton_ops.run_quantize_kernel
    assert functional.FP8_SCALE_MAX == 448.0 and functional.FP6_SCALE_MAX == 0.1172
    import ltx_kernels
    from ltx_kernels import all_to_all

    assert ltx_kernels.All2All is all_to_all.All2All


# ---------------------------------------------------------------------------------------------
# ltx-core's own import lines, verbatim, and its call patterns (positional, as it writes them)

def test_ltx_core_import_lines():
    exec("from ltx_kernels.blockwise.functional import (\n"
         "    blockwise_dequantize,\n    blockwise_quantize_adanorm_triton,\n    blockwise_quantize_rms_fma_triton,\n"
         "    fp6_blockwise_quantize_weights_torch,\n    fp6_pack_tensor,\n    fp6_unpack_tensor,\n"
         "    fp8_blockwise_quantize_weights_torch,\n    gated_attention_triton,\n    rms_norm_rope,\n"
         "    rms_norm_split_rope,\n)\n"
         "from ltx_kernels.blockwise.linear import BlockwiseFP6Linear, BlockwiseFP8Linear\n"
         "from ltx_kernels import All2All\n"
         "from ltx_kernels import nvfp4 as nvfp4_mod\n"
         "from ltx_kernels import nvfp4\n"
         "from ltx_kernels.vae import na_attn_available\n"
         "from ltx_kernels.vae import fna_supported\n"
         "from ltx_kernels.vae import run_block_fna_dsl, run_na_attention_bound, softmax_row_bound\n"
         "from ltx_kernels.vae import pack_fused_ctx_weights, OUT_SLACK_ROWS\n"
         "import ltx_kernels.vae\n", {})


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_ltx_core_activation_ops(device):
    """The four activation callables of ltx-core's blockwise policy, with its argument lists."""
    from ltx_kernels.blockwise.functional import (blockwise_dequantize, blockwise_quantize_adanorm_triton,
                                                  blockwise_quantize_rms_fma_triton, gated_attention_triton,
                                                  rms_norm_split_rope)

    b, t, nh, dh = 1, 6, 2, 128
    h = nh * dh
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
    x = rnd(b, t, h).to(torch.bfloat16)
    # pre-attention: rope_func(q, pe[0], pe[1], q_norm.weight, False), pe in ltx-core's swapaxes layout
    cos = rnd(b, t, nh, dh // 2).to(torch.bfloat16).swapaxes(1, 2)
    sin = rnd(b, t, nh, dh // 2).to(torch.bfloat16).swapaxes(1, 2)
    w = (1 + 0.1 * rnd(h)).to(torch.bfloat16)
    q = rms_norm_split_rope(x, cos, sin, w, False)
    want = ref.rms_norm_split_rope(x, cos, sin, w, False, 1e-6)
    assert q.dtype == torch.bfloat16 and q.shape == x.shape and _rel(q, want) < 4e-3
    # ada_zero: blockwise_quantize_adanorm_triton(x, None, scale, shift, torch.float8_e4m3fn, 1.0)
    scale, shift = (0.1 * rnd(b, 1, h)).to(torch.bfloat16), (0.1 * rnd(b, 1, h)).to(torch.bfloat16)
    pair = blockwise_quantize_adanorm_triton(x, None, scale, shift, torch.float8_e4m3fn, 1.0)
    assert isinstance(pair, tuple) and pair[0].dtype == FP8 and pair[0].shape == x.shape
    assert pair[1].shape == (b * t, h // 128) and pair[1].stride() == (1, ref.align4(b * t))
    normed = ref.rms_norm(x.float(), 1e-6) * (1 + scale.float()) + shift.float()
    assert _rel(blockwise_dequantize(pair), normed) < 0.07
    # post_sa: normed_fp8 = blockwise_quantize_rms_fma_triton(x, y, gate); blockwise_dequantize(normed_fp8)
    xr, y, gate = x.clone(), rnd(b, t, h).to(torch.bfloat16), rnd(b, 1, h).to(torch.bfloat16)
    normed_fp8 = blockwise_quantize_rms_fma_triton(xr, y, gate)
    resid = (x.float() + y.float() * gate.float()).to(torch.bfloat16)
    assert torch.equal(xr, resid), "the residual is updated in place, as upstream"
    assert _rel(blockwise_dequantize(normed_fp8), ref.rms_norm(resid.float(), 1e-6)) < 0.07
    # gated attention: gated_attention_triton(attn_out, gate_logits) -> (q, scales) fed to the linear
    logits = rnd(b, t, nh).to(torch.bfloat16)
    gq = gated_attention_triton(x, logits)
    gate_ref = (x.float().view(b, t, nh, dh) * 2 * torch.sigmoid(logits.float())[..., None]).view(b, t, h)
    assert gq[0].dtype == FP8 and _rel(blockwise_dequantize(gq), gate_ref) < 0.07
    with pytest.raises(TypeError, match="pair"):
        blockwise_dequantize(gq[0])


def test_ltx_core_weight_path_and_layers(device):
    """Load-time quantization, the FP8/FP6 fuse round trips and the layers as ltx-core drives them."""
    from torch import nn

    from ltx_kernels.blockwise.functional import (blockwise_dequantize, fp6_blockwise_quantize_weights_torch,
                                                  fp6_pack_tensor, fp6_unpack_tensor,
                                                  fp8_blockwise_quantize_weights_torch)
    from ltx_kernels.blockwise.linear import BlockwiseFP6Linear, BlockwiseFP8Linear

    torch.manual_seed(1)
    lin = nn.Linear(256, 384).to(device)
    w = lin.weight.detach().to(torch.bfloat16)
    for cls, quant, pack in ((BlockwiseFP8Linear, fp8_blockwise_quantize_weights_torch, lambda q: q),
                             (BlockwiseFP6Linear, fp6_blockwise_quantize_weights_torch, fp6_pack_tensor)):
        wq, ws = quant(w)
        assert ws.shape == (3, 2) and ws.dtype == torch.float32
        stored = pack(wq) if cls is BlockwiseFP8Linear else pack(wq.view(torch.uint8))
        # ltx-core's _blockwise_dequantize_2d: per-row scales of a [1, out, in] "activation"
        codes = wq if cls is BlockwiseFP8Linear else fp6_unpack_tensor(stored, 256).view(FP8)
        rows = ws.repeat_interleave(128, dim=0)
        deq = blockwise_dequantize((codes.unsqueeze(0), rows)).view(384, 256)
        assert _rel(deq, w) < 0.07
        # _replace_linear_modules: from_linear(module, False), then the checkpoint's tensors arrive
        layer = cls.from_linear(lin, False)
        layer.load_state_dict({"weight": stored, "weight_scale": ws, "bias": lin.bias.detach().float()})
        x = torch.randn(2, 5, 256, device=device).to(torch.bfloat16)
        want = x.float() @ deq.float().t() + lin.bias.detach().float()
        assert layer(x).shape == (2, 5, 384) and _rel(layer(x), want) < 0.07
        from ltx_kernels.blockwise.triton_ops import blockwise_quantize_triton

        assert torch.equal(layer(blockwise_quantize_triton(x)), layer(x))


def test_upstream_gemm_entry_points(device):
    from ltx_kernels.blockwise import linear

    torch.manual_seed(2)
    a = torch.randn(3, 4, 256, device=device).to(torch.bfloat16)
    qa, sa = linear.blockwise_quantize_triton(a)
    qb, sb = linear.blockwise_quantize_weights(torch.randn(128, 256, device=device))
    bias = torch.randn(128, device=device)
    d = torch.full((12, 128), float("nan"), dtype=torch.bfloat16, device=device)
    linear.get_fp8_gemm_nt()((qa.view(12, 256), sa), (qb, sb), d, bias=bias)
    want = linear.blockwise_fp8_gemm([qa.view(12, 256), sa], [qb, sb], bias, True)
    assert torch.equal(d, want) and not d.isnan().any()
    fake = linear.blockwise_fp8_gemm_fake([qa.view(12, 256), sa], [qb, sb], bias, True)
    assert fake.shape == want.shape and fake.dtype == torch.bfloat16
    y = linear.blockwise_linear_func((a, None), (qb, sb), bias)
    assert y.shape == (3, 4, 128) and torch.equal(y.view(12, 128), want)
    assert torch.equal(linear.BlockwiseGemmLinearFunc.apply((qa, sa), (qb, sb), bias), y)
    assert linear.is_16bit(a) and not linear.is_16bit(qa)
    with pytest.raises(ValueError, match="c "):
        linear.get_fp8_gemm_nt()((qa.view(12, 256), sa), (qb, sb), d, c=d)
    with pytest.raises(NotImplementedError):
        linear.BlockwiseLinear(256, 128).fp8weight


@pytest.mark.parametrize("smax", [448.0, 0.1172])
def test_weight_quantizers_compute_upstreams_codes(smax, device):
    """ltx-core quantizes checkpoint weights at load with these: they take upstream's steps
    (factor = fp32(fp32(1 / amax) * scale_max), codes RN(fp32(w * factor)), scale fp32(1 / factor)),
    so the FP8 / FP6 weights equal upstream's bit for bit. Checked against those steps emulated in
    float64 (each fp32 rounding explicit)."""
    import oracle as O
    from ltx_kernels.blockwise import functional as f

    torch.manual_seed(5)
    w = (torch.randn(384, 512, device=device) * torch.rand(384, 1, device=device) * 3).to(torch.bfloat16)
    w[:128, :128] = 0  # an all-zero block: finite here (upstream's would be NaN)
    q, s = (f.fp8_blockwise_quantize_weights_torch if smax == 448.0 else f.fp6_blockwise_quantize_weights_torch)(w)
    blocks = O.f64(w).view(3, 128, 4, 128)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(ref.AMAX_FLOOR)
    factor = O.fp32(O.fp32(1.0 / amax) * O.fp32(torch.tensor(smax, dtype=torch.float64)))
    want_q = O.round_e4m3(O.fp32(blocks * factor)).view(384, 512)
    assert torch.equal(O.f64(q), want_q)
    assert torch.equal(O.f64(s), O.fp32(1.0 / factor)[:, 0, :, 0])
    assert torch.isfinite(s).all() and not q[:128, :128].float().any()
    # the package's own quantizer divides: the same scales to an ulp, a few codes one step away
    import ltx_kernels as lk

    q2, s2 = lk.quantize_weights_blockwise(w, scale_max=smax)
    differ = (q.view(torch.uint8) != q2.view(torch.uint8)).sum().item()
    assert differ < q.numel() // 500 and torch.allclose(s, s2, rtol=2.0 ** -22, atol=0.0)


def test_upstream_functional_extras(device):
    from ltx_kernels.blockwise import functional as f
    from ltx_kernels.blockwise import triton_ops as t

    torch.manual_seed(3)
    x = torch.randn(2, 3, 256, device=device).to(torch.bfloat16)
    q, s = f.blockwise_quantize_torch(x)
    qr, sr = ref.quantize_blockwise(x)
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8))
    assert s.shape == (2, 6) and s.is_contiguous() and torch.equal(s, sr.t())
    with pytest.raises(ValueError, match="block_size"):
        f.fp8_blockwise_quantize_weights_torch(torch.randn(128, 128, device=device), 64)
    assert t.get_tma_aligned_size(5, 4) == 8 and t.get_tma_aligned_size(8, 4) == 8
    cos = torch.randn(2, 3, 256, device=device).to(torch.bfloat16)
    sin = torch.randn(2, 3, 256, device=device).to(torch.bfloat16)
    out = f.RMSNormRope.apply(x, None, cos, sin, True)
    assert torch.equal(out, f.rms_norm_rope(x, cos, sin))
    cs = torch.randn(2, 2, 3, 64, device=device).to(torch.bfloat16)
    assert torch.equal(f.RMSNormSplitRope.apply(x, cs, cs.flip(-1), None, False),
                       f.rms_norm_split_rope(x, cs.flip(-1), cs, None, False))
    xr = x.clone()
    y, z = torch.randn_like(x), torch.rand(2, 1, 256, device=device).to(torch.bfloat16)
    normed = t.run_rms_fma(xr, y, z)
    r = (x.float() + y.float() * z.float()).to(torch.bfloat16)
    assert torch.equal(xr, r) and torch.equal(normed, ref.rms_norm(r.float(), 1e-6).to(torch.bfloat16))
    qi, si = t.rowwise_int_quantize_triton(torch.tensor([[1.0, -2.54, 0.0], [0.0, 0.0, 0.0]]))
    assert qi.dtype == torch.int8 and qi[0].tolist() == [50, -127, 0] and qi[1].tolist() == [0, 0, 0]
    assert torch.allclose(si, torch.tensor([2.54 / 127, 1.0]))
    out, none = t.run_gated_attention(x, torch.randn(2, 3, 2, device=device), False)
    assert none is None and out.dtype == torch.bfloat16
    # upstream's kernels write bf16 whatever the input dtype
    x32 = x.float()
    assert t.rms_fma_triton(x32.clone(), y.float(), z.float()).dtype == torch.bfloat16
    out32, _ = t.gated_attention_triton(x32, torch.randn(2, 3, 2, device=device), False)
    assert out32.dtype == torch.bfloat16
    # fp16 in: rounded once, from fp32 (x * 2 sigmoid(g) may pass fp16's 65504)
    x16 = torch.full((1, 2, 256), 60000.0, device=device, dtype=torch.float16)
    g = torch.full((1, 2, 2), 10.0, device=device, dtype=torch.float16)
    out16, _ = t.gated_attention_triton(x16, g, False)
    want = (x16.float() * 2 * torch.sigmoid(g.float()).repeat_interleave(128, -1)).to(torch.bfloat16)
    assert torch.equal(out16, want) and torch.isfinite(out16).all()
    # torch.library int arguments also take numpy integers and 0-d integer tensors
    codes = torch.randint(0, 256, (3, 256), device=device, dtype=torch.uint8)
    packed = f.fp6_pack_tensor(codes)
    for n in (np.int64(256), torch.tensor(256)):
        assert torch.equal(f.fp6_unpack_tensor(packed, n), f.fp6_unpack_tensor(packed, 256))
    for bad in (256.0, True, torch.tensor(256.0)):
        with pytest.raises(TypeError, match="n must be an int"):
            f.fp6_unpack_tensor(packed, bad)


def test_arch_names():
    from ltx_kernels import arch

    if torch.cuda.is_available():
        assert arch.get_device_arch() in ("ampere", "ada", "hopper", "blackwell")
    else:
        with pytest.raises(RuntimeError, match="CUDA"):
            arch.get_device_arch()
    with pytest.raises(NotImplementedError, match="sm_75"):
        arch._family(7, 5)
    assert arch._family(8, 9) == "ada" and arch._family(12, 0) == "blackwell"


def test_newer_ltx_core_gates_answer_honestly():
    from ltx_kernels import nvfp4, vae

    reason = nvfp4.unavailable_reason()
    assert reason and "NVFP4" in reason and "sm_100" in reason and not nvfp4.is_available()
    with pytest.raises(RuntimeError, match="no NVFP4 kernels"):
        nvfp4.quantize_nvfp4(torch.zeros(16, 16), torch.ones(()))
    assert nvfp4.scale_shape(130, 64) == (256, 4)
    assert nvfp4.per_tensor_decode_scale(torch.tensor([1.0, float("nan"), -2688.0])).item() == 1.0
    assert not vae.na_attn_available() and not vae.block_fna_available()
    assert not vae.na_supported(num_heads=8, head_dim=64, kernel_size=(3, 3, 3), T=8, H=8, W=8)
    with pytest.raises(RuntimeError, match="tcgen05"):
        vae.run_na_attention(None, None, None, kernel_size=(3, 3, 3), k_norm_weight=None)
    assert vae.OUT_SLACK_ROWS == 128  # ltx-core sizes its block volumes with it


def test_vae_load_time_weight_transforms():
    """ltx-core runs these while loading a decoder checkpoint; checked against the modules they
    stand for, in float64: an upsample Linear [P*C, Ctx] whose rows a pixel shuffle lays out as
    (channel, subpixel), then context_proj [C, C] on each subpixel."""
    from ltx_kernels import vae

    w = torch.tensor([0.5, -2.0, 1.5, 0.25])
    assert torch.equal(vae.softmax_row_bound(w), torch.tensor(2.0 * 4 ** 0.5))
    c, p, ctx = 6, 8, 5
    g = torch.Generator().manual_seed(0)
    w_up, b_up = torch.randn(c * p, ctx, generator=g, dtype=torch.float64), torch.randn(c * p, generator=g,
                                                                                          dtype=torch.float64)
    w_ctx, b_ctx = torch.randn(c, c, generator=g, dtype=torch.float64), torch.randn(c, generator=g, dtype=torch.float64)
    x = torch.randn(3, ctx, generator=g, dtype=torch.float64)
    up = (x @ w_up.t() + b_up).view(3, c, p)  # channel c of subpixel s
    want = torch.stack([up[:, :, s] @ w_ctx.t() + b_ctx for s in range(p)], dim=1)  # [3, P, C]
    wf, bf = vae.pack_fused_ctx_weights(w_up, b_up, w_ctx, b_ctx)
    assert wf.shape == (p * c, ctx) and bf.shape == (p * c,) and wf.dtype == torch.float64
    torch.testing.assert_close((x @ wf.t() + bf).view(3, p, c), want, rtol=1e-6, atol=1e-6)  # (fp32 sums)
    with pytest.raises(ValueError, match="square"):
        vae.pack_fused_ctx_weights(w_up, b_up, w_ctx[:, :5], b_ctx)
    with pytest.raises(ValueError, match="multiple of C"):
        vae.pack_fused_ctx_weights(w_up[:-1], b_up[:-1], w_ctx, b_ctx)


def test_all2all_upstream_calls():
    """AttentionManager's construction by keyword and its setters, at world size 1 (CPU)."""
    import ltx_kernels as lk

    a = lk.All2All(rank=0, world_size=1, seqlen=8, hidden_dim=256, num_sms=1, tensor_dtype=torch.bfloat16,
                   group=None, device="cpu")
    assert a.tensor_dtype == torch.bfloat16 and a.buffer_size == 8 * 256 * 2  # upstream's attributes
    a.set_rank_tokens([5])
    a.set_timeout_seconds(0)
    a.set_timeout_seconds(30.0)
    x = torch.randn(1, 5, 2, 128).to(torch.bfloat16)
    assert torch.equal(a.send_recv_heads(x, copy_out=False), x)
    assert torch.equal(a.gather_heads(x, copy_out=True), x)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="seconds"):
            a.set_timeout_seconds(bad)
    a.destroy()
