"""One representative call per op: inputs, the reference, a comparison and a byte/FLOP count.

Shared by ``python -m ltx_kernels`` (self-check and quick benchmark) and the warmup.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import fp6, gemm, norm_rope, quantize
from . import reference as ref

FP8 = torch.float8_e4m3fn


@dataclass
class Case:
    name: str
    op: object  # the _dispatch.Op, for backend availability
    make: Callable[[torch.device, bool], dict]  # (device, big) -> inputs
    run: Callable[[dict, str], object]  # (inputs, backend) -> output
    reference: Callable[[dict], object]
    check: Callable[[object, object], str | None]  # None when close enough, else what differs
    traffic: Callable[[dict], tuple[float, float]]  # (bytes, flops)


def _nbytes(*ts) -> float:
    return float(sum(t.numel() * t.element_size() for t in ts if t is not None))


def _rel(out, want) -> float:
    o, w = out.float(), want.float()
    return float((o - w).norm() / w.norm().clamp_min(1e-30))


def _close(tol):
    def check(out, want):
        outs = out if isinstance(out, tuple) else (out,)
        wants = want if isinstance(want, tuple) else (want,)
        for o, w in zip(outs, wants):
            if o is None:
                continue
            if not bool(torch.isfinite(o.float()).all()):
                return "non-finite output"
            e = _rel(o, w)
            if e > tol:
                return f"rel. error {e:.2e} > {tol:.0e}"
        return None
    return check


def _exact(out, want):
    return None if torch.equal(out.view(torch.uint8), want.view(torch.uint8)) else "bits differ"


def _norm_inputs(dev, big, split):
    b, t, h, nh = (1, 8192, 4096, 32) if big else (2, 24, 256, 4)
    x = torch.randn(b, t, h, device=dev, dtype=torch.bfloat16)
    w = torch.rand(h, device=dev, dtype=torch.bfloat16) + 0.5
    if split:
        c = torch.randn(1, t, nh, h // nh // 2, device=dev).to(torch.bfloat16).swapaxes(1, 2)
        s = torch.randn(1, t, nh, h // nh // 2, device=dev).to(torch.bfloat16).swapaxes(1, 2)
    else:
        c = torch.randn(1, t, h, device=dev, dtype=torch.bfloat16)
        s = torch.randn(1, t, h, device=dev, dtype=torch.bfloat16)
    return {"x": x, "c": c, "s": s, "w": w}


def _quant_inputs(dev, big):
    m, k = (32768, 4096) if big else (37, 512)
    return {"x": torch.randn(1, m, k, device=dev, dtype=torch.bfloat16) * 4}


def _adanorm_inputs(dev, big):
    d = _quant_inputs(dev, big)
    k = d["x"].shape[-1]
    d["scale"] = torch.randn(1, 1, k, device=dev, dtype=torch.bfloat16) * 0.1
    d["shift"] = torch.randn(1, 1, k, device=dev, dtype=torch.bfloat16) * 0.1
    return d


def _fp6_inputs(dev, big):
    shape = (16384, 8192) if big else (33, 256)
    return {"x": torch.randint(0, 256, shape, device=dev, dtype=torch.uint8) & 0x9F}


def _gemm_inputs(dev, big):
    m, n, k = (4096, 4096, 4096) if big else (130, 384, 256)
    a, sa = ref.quantize_blockwise(torch.randn(m, k, device=dev))
    b, sb = ref.quantize_weights_blockwise(torch.randn(n, k, device=dev))
    return {"a": a, "sa": sa, "b": b, "sb": sb, "bias": torch.randn(n, device=dev)}


def _norm_bytes(d, out_fp8):
    x = d["x"]
    return _nbytes(x, d["c"], d["s"]) + x.numel() * (1 if out_fp8 else 2), 0.0


CASES = [
    Case("rms_norm_split_rope", norm_rope.split_op, lambda dev, big: _norm_inputs(dev, big, True),
         lambda d, be: norm_rope.rms_norm_split_rope(d["x"], d["c"], d["s"], d["w"], backend=be),
         lambda d: ref.rms_norm_split_rope(d["x"], d["c"], d["s"], d["w"]), _close(1e-2),
         lambda d: _norm_bytes(d, False)),
    Case("rms_norm_rope", norm_rope.interleaved_op, lambda dev, big: _norm_inputs(dev, big, False),
         lambda d, be: norm_rope.rms_norm_rope(d["x"], d["c"], d["s"], d["w"], backend=be),
         lambda d: ref.rms_norm_rope(d["x"], d["c"], d["s"], d["w"]), _close(1e-2),
         lambda d: _norm_bytes(d, False)),
    Case("fp6_pack", fp6.pack_op, _fp6_inputs, lambda d, be: fp6.fp6_pack(d["x"], backend=be),
         lambda d: ref.fp6_pack(d["x"]), _exact, lambda d: (d["x"].numel() * 1.75, 0.0)),
    Case("fp6_unpack", fp6.unpack_op, lambda dev, big: {"p": ref.fp6_pack(_fp6_inputs(dev, big)["x"])},
         lambda d, be: fp6.fp6_unpack(d["p"], d["p"].shape[-1] // 3 * 4, backend=be),
         lambda d: ref.fp6_unpack(d["p"], d["p"].shape[-1] // 3 * 4), _exact,
         lambda d: (d["p"].numel() / 0.75 * 1.75, 0.0)),
    Case("quantize_blockwise", quantize.quantize_op, _quant_inputs,
         lambda d, be: quantize.quantize_blockwise(d["x"], backend=be)[0],
         lambda d: ref.quantize_blockwise(d["x"])[0], _exact,
         lambda d: (d["x"].numel() * 3 + d["x"].numel() / 32, 0.0)),
    Case("quantize_adanorm", quantize.adanorm_op, _adanorm_inputs,
         lambda d, be: quantize.quantize_adanorm(d["x"], d["scale"], d["shift"], backend=be),
         lambda d: ref.dequantize_blockwise(*ref.quantize_adanorm(d["x"], d["scale"], d["shift"])),
         lambda got, want: _close(2e-2)(ref.dequantize_blockwise(*got), want),
         lambda d: (d["x"].numel() * 3 + d["x"].numel() / 32 + _nbytes(d["scale"], d["shift"]), 0.0)),
    Case("fp8_gemm_nt", gemm.gemm_op, _gemm_inputs,
         lambda d, be: gemm.fp8_gemm_nt(d["a"], d["sa"], d["b"], d["sb"], d["bias"], backend=be),
         lambda d: ref.fp8_gemm_nt(d["a"], d["sa"], d["b"], d["sb"], d["bias"]), _close(3e-3),
         lambda d: (_nbytes(d["a"], d["b"]) + d["a"].shape[0] * d["b"].shape[0] * 2,
                    2.0 * d["a"].shape[0] * d["b"].shape[0] * d["a"].shape[1])),
]
