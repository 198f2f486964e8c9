"""One representative call per public op: inputs, the backends that can take them, the reference,
a comparison and a byte/FLOP count. Used by ``python -m ltx_kernels`` (self-check and quick
benchmark).

Every public op of the README's table is here, the two quantized linear layers and All2All at
world size 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import fp6, gemm, norm_rope, quantize
from . import reference as ref
from ._dispatch import BACKENDS, BackendUnavailable

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
NOT_IMPLEMENTED = "not implemented for this op"


@dataclass
class Case:
    name: str
    make: Callable[[torch.device, bool], dict]  # (device, big) -> inputs
    run: Callable[[dict, str], object]  # (inputs, backend) -> output
    reference: Callable[[dict], object]
    check: Callable[[object, object], str | None]  # None when close enough, else what differs
    traffic: Callable[[dict], tuple[float, float]] | None  # (bytes, flops); None: not benchmarked
    op: object = None  # the _dispatch.Op whose backends the case checks
    probe: Callable[[dict], tuple] | None = None  # the positional arguments the op's backends check
    # For what is not one op (the layers, All2All): backend -> reasons, and what "auto" takes.
    why_not_fn: Callable[[dict], dict] | None = None
    auto_fn: Callable[[dict], str] | None = None
    # Backends checked besides cuda / triton / torch ("auto" where it mixes them).
    extra: Callable[[dict], list] | None = None

    def why_not(self, d: dict) -> dict[str, list]:
        return self.why_not_fn(d) if self.why_not_fn else self.op.why_not(*self.probe(d))

    def auto(self, d: dict) -> str:
        if self.auto_fn:
            return self.auto_fn(d)
        try:
            return self.op.select("auto", *self.probe(d)).name
        except BackendUnavailable:
            return "none"

    def checked_backends(self, d: dict) -> list[tuple[str, list]]:
        """(backend, reasons it cannot run here) for every backend the case has."""
        out = [(be, r) for be, r in self.why_not(d).items() if not (r and r[0].startswith(NOT_IMPLEMENTED))]
        for be in self.extra(d) if self.extra else []:
            out.append((be, []))
        return out


# --------------------------------------------------------------------------------------- checks

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
            if tuple(o.shape) != tuple(w.shape):
                return f"shape {tuple(o.shape)} != {tuple(w.shape)}"
            if not bool(torch.isfinite(o.float()).all()):
                return "non-finite output"
            e = _rel(o, w)
            if e > tol:
                return f"rel. error {e:.2e} > {tol:.0e}"
        return None
    return check


def _exact(out, want):
    outs = out if isinstance(out, tuple) else (out,)
    wants = want if isinstance(want, tuple) else (want,)
    for i, (o, w) in enumerate(zip(outs, wants)):
        if tuple(o.shape) != tuple(w.shape):
            return f"output {i}: shape {tuple(o.shape)} != {tuple(w.shape)}"
        if o.dtype != w.dtype:
            return f"output {i}: dtype {o.dtype} != {w.dtype}"
        if not torch.equal(o.contiguous().view(torch.uint8), w.contiguous().view(torch.uint8)):
            return f"output {i}: bits differ"
    return None


def _dequantized(tol):
    """Compare (q, scales) pairs (and any plain tensors after them) through their dequantized values."""
    def check(out, want):
        got = (ref.dequantize_blockwise(out[0], out[1]),) + tuple(out[2:])
        exp = (ref.dequantize_blockwise(want[0], want[1]),) + tuple(want[2:])
        return _close(tol)(got, exp)
    return check


# --------------------------------------------------------------------------------------- inputs

def _norm_inputs(dev, big, split):
    b, t, h, nh = (1, 8192, 4096, 32) if big else (2, 24, 256, 4)
    x = torch.randn(b, t, h, device=dev, dtype=BF16)
    w = torch.rand(h, device=dev, dtype=BF16) + 0.5
    if split:
        c = torch.randn(1, t, nh, h // nh // 2, device=dev).to(BF16).swapaxes(1, 2)
        s = torch.randn(1, t, nh, h // nh // 2, device=dev).to(BF16).swapaxes(1, 2)
    else:
        c = torch.randn(1, t, h, device=dev, dtype=BF16)
        s = torch.randn(1, t, h, device=dev, dtype=BF16)
    return {"x": x, "c": c, "s": s, "w": w}


def _rows(big):
    return (32768, 4096) if big else (37, 512)


def _quant_inputs(dev, big):
    m, k = _rows(big)
    return {"x": torch.randn(1, m, k, device=dev, dtype=BF16) * 4}


def _weight_inputs(dev, big):
    n, k = (4096, 4096) if big else (384, 256)
    return {"w": torch.randn(n, k, device=dev, dtype=BF16)}


def _dequant_inputs(dev, big):
    m, k = _rows(big)
    q, s = quantize.quantize_blockwise(torch.randn(m, k, device=dev) * 4, backend="torch")
    wq, ws = quantize.quantize_weights_blockwise(_weight_inputs(dev, big)["w"], backend="torch")
    return {"q": q, "s": s, "wq": wq, "ws": ws}


def _adanorm_inputs(dev, big):
    d = _quant_inputs(dev, big)
    k = d["x"].shape[-1]
    d["scale"] = torch.randn(1, 1, k, device=dev, dtype=BF16) * 0.1
    d["shift"] = torch.randn(1, 1, k, device=dev, dtype=BF16) * 0.1
    return d


def _rms_fma_inputs(dev, big):
    d = _quant_inputs(dev, big)
    k = d["x"].shape[-1]
    d["y"] = torch.randn_like(d["x"])
    d["gate"] = torch.randn(1, 1, k, device=dev, dtype=BF16)
    return d


def _gated_inputs(dev, big):
    d = _quant_inputs(dev, big)
    m = d["x"].shape[1]
    d["logits"] = torch.randn(1, m, 32 if big else 4, device=dev, dtype=BF16) * 3
    return d


def _fp6_inputs(dev, big):
    shape = (16384, 8192) if big else (33, 256)
    return {"x": torch.randint(0, 256, shape, device=dev, dtype=torch.uint8) & 0x9F}


def _gemm_inputs(dev, big):
    m, n, k = (4096, 4096, 4096) if big else (130, 384, 256)
    a, sa = ref.quantize_blockwise(torch.randn(m, k, device=dev))
    b, sb = ref.quantize_weights_blockwise(torch.randn(n, k, device=dev))
    return {"a": a, "sa": sa, "b": b, "sb": sb, "bias": torch.randn(n, device=dev)}


def _norm_bytes(d):
    return _nbytes(d["x"], d["c"], d["s"]) + d["x"].numel() * 2, 0.0


def _quant_bytes(d, *extra):
    x = d["x"]
    return x.numel() * 3 + x.numel() / 32 + _nbytes(*extra), 0.0


# --------------------------------------------------------------------------------------- linears

def _linear_inputs(dev, big, cls):
    from .linear import BlockwiseFP6Linear, BlockwiseFP8Linear

    m, k, n = (4096, 4096, 4096) if big else (70, 256, 384)
    lin = torch.nn.Linear(k, n, device=dev)
    layer = (BlockwiseFP6Linear if cls == "fp6" else BlockwiseFP8Linear).from_linear(lin, backend="torch")
    return {"x": torch.randn(2, m // 2, k, device=dev, dtype=BF16), "layer": layer, "fp6": cls == "fp6"}


def _linear_parts(d) -> list[tuple[str, object, tuple]]:
    """The ops a layer's forward calls, with the arguments their backends check."""
    layer, x = d["layer"], d["x"]
    q, s = quantize.quantize_blockwise(x, backend="torch")
    w = layer.weight
    parts = [("quantize_blockwise", quantize.quantize_op, (x, quantize.FP8_SCALE_MAX, False))]
    if d["fp6"]:
        parts.append(("fp6_unpack", fp6.unpack_op, (w, layer.in_features)))
        w = ref.fp6_unpack(w, layer.in_features).view(FP8)
    q2 = q.reshape(-1, q.shape[-1])
    out = torch.empty(q2.shape[0], w.shape[0], device=x.device, dtype=BF16)
    parts.append(("fp8_gemm_nt", gemm.gemm_op, (q2, s, w, layer.weight_scale, layer.bias, out)))
    return parts


def _linear_why_not(d) -> dict:
    out = {}
    for be in BACKENDS:
        r = []
        for name, op, args in _linear_parts(d):
            r += [f"{name}: {x}" for x in op.why_not(*args)[be]]
        out[be] = r
    # Only the GEMM has a cuda backend: the layer as a whole has none; "auto" takes the GEMM's.
    out["cuda"] = [f"{NOT_IMPLEMENTED} as a whole (only its GEMM has a cuda backend, which 'auto' takes where it can)"]
    return out


def _linear_auto(d) -> str:
    picks = []
    for name, op, args in _linear_parts(d):
        try:
            picks.append((name, op.select("auto", *args).name))
        except BackendUnavailable:
            picks.append((name, "none"))
    if len({b for _, b in picks}) == 1:
        return picks[0][1]
    return ", ".join(f"{n}: {b}" for n, b in picks)


def _linear_extra(d) -> list:
    """'auto' is checked too where it mixes backends (e.g. Triton quantize, CUDA GEMM)."""
    return ["auto"] if "," in _linear_auto(d) else []


def _linear_run(d, be):
    layer = d["layer"]
    layer.backend = be
    try:
        return layer(d["x"])
    finally:
        layer.backend = "auto"


def _linear_reference(d):
    layer, x = d["layer"], d["x"]
    k = layer.in_features
    w = ref.fp6_unpack(layer.weight, k).view(FP8) if d["fp6"] else layer.weight
    q, s = ref.quantize_blockwise(x.reshape(-1, k))
    return ref.fp8_gemm_nt(q, s, w, layer.weight_scale, layer.bias).view(*x.shape[:-1], layer.out_features)


def _linear_traffic(d):
    x, layer = d["x"], d["layer"]
    m = x.numel() // x.shape[-1]
    return (_nbytes(x, layer.weight) + m * layer.out_features * 2,
            2.0 * m * layer.in_features * layer.out_features)


# --------------------------------------------------------------------------------------- All2All

def _a2a_inputs(dev, big):
    t, h, dd = (8192, 32, 128) if big else (24, 4, 64)
    return {"x": torch.randn(1, t, h, dd, device=dev, dtype=BF16)}


def _a2a(d, backend):
    from .all2all import All2All

    x = d["x"]
    _, t, h, dd = x.shape
    return All2All(0, 1, t, h * dd, 8, x.dtype, device=x.device, backend=backend)


def _a2a_why_not(d) -> dict:
    a = _a2a(d, "torch")
    try:
        return {"cuda": a.cuda_reasons([a._info()]), "triton": [NOT_IMPLEMENTED], "torch": a.torch_reasons()}
    finally:
        a.destroy()


def _a2a_auto(d) -> str:
    r = _a2a_why_not(d)
    return next((be for be in ("cuda", "torch") if not r[be]), "none")


def _a2a_run(d, be):
    a = _a2a(d, be)
    try:
        x = d["x"]
        y = a.send_recv_heads(x, copy_out=True)
        back = a.gather_heads(y, copy_out=True)
        g = a.allgather(x, copy_out=True)
        a.check()
        return y, back, g
    finally:
        a.destroy()


def _a2a_reference(d):
    x = d["x"]
    return ref.send_recv_heads([x])[0], ref.gather_heads(ref.send_recv_heads([x]), [x.shape[1]])[0], \
        ref.allgather([x])[0]


# --------------------------------------------------------------------------------------- cases

CASES = [
    Case("rms_norm_rope", lambda dev, big: _norm_inputs(dev, big, False),
         lambda d, be: norm_rope.rms_norm_rope(d["x"], d["c"], d["s"], d["w"], backend=be),
         lambda d: ref.rms_norm_rope(d["x"], d["c"], d["s"], d["w"]), _close(1e-2), _norm_bytes,
         op=norm_rope.interleaved_op, probe=lambda d: (d["x"], d["c"], d["s"], d["w"], False, 1e-6)),
    Case("rms_norm_split_rope", lambda dev, big: _norm_inputs(dev, big, True),
         lambda d, be: norm_rope.rms_norm_split_rope(d["x"], d["c"], d["s"], d["w"], backend=be),
         lambda d: ref.rms_norm_split_rope(d["x"], d["c"], d["s"], d["w"]), _close(1e-2), _norm_bytes,
         op=norm_rope.split_op, probe=lambda d: (d["x"], d["c"], d["s"], d["w"], False, 1e-6)),
    Case("fp6_pack", _fp6_inputs, lambda d, be: fp6.fp6_pack(d["x"], backend=be),
         lambda d: ref.fp6_pack(d["x"]), _exact, lambda d: (d["x"].numel() * 1.75, 0.0),
         op=fp6.pack_op, probe=lambda d: (d["x"],)),
    Case("fp6_unpack", lambda dev, big: {"p": ref.fp6_pack(_fp6_inputs(dev, big)["x"])},
         lambda d, be: fp6.fp6_unpack(d["p"], d["p"].shape[-1] // 3 * 4, backend=be),
         lambda d: ref.fp6_unpack(d["p"], d["p"].shape[-1] // 3 * 4), _exact,
         lambda d: (d["p"].numel() / 0.75 * 1.75, 0.0),
         op=fp6.unpack_op, probe=lambda d: (d["p"], d["p"].shape[-1] // 3 * 4)),
    Case("quantize_blockwise", _quant_inputs,
         lambda d, be: quantize.quantize_blockwise(d["x"], backend=be),
         lambda d: ref.quantize_blockwise(d["x"]), _exact, _quant_bytes,
         op=quantize.quantize_op, probe=lambda d: (d["x"], quantize.FP8_SCALE_MAX, False)),
    Case("quantize_weights_blockwise", _weight_inputs,
         lambda d, be: quantize.quantize_weights_blockwise(d["w"], backend=be),
         lambda d: ref.quantize_weights_blockwise(d["w"]), _exact,
         lambda d: (d["w"].numel() * 3 + d["w"].numel() / 4096, 0.0),
         op=quantize.weights_op, probe=lambda d: (d["w"], quantize.FP8_SCALE_MAX)),
    Case("dequantize_blockwise", _dequant_inputs,
         lambda d, be: (quantize.dequantize_blockwise(d["q"], d["s"], backend=be),
                        quantize.dequantize_blockwise(d["wq"], d["ws"], backend=be)),
         lambda d: (ref.dequantize_blockwise(d["q"], d["s"]), ref.dequantize_blockwise(d["wq"], d["ws"])),
         _exact, lambda d: (_nbytes(d["q"], d["wq"]) * 3, 0.0),
         op=quantize.dequantize_op, probe=lambda d: (d["q"], d["s"], BF16)),
    Case("quantize_adanorm", _adanorm_inputs,
         lambda d, be: quantize.quantize_adanorm(d["x"], d["scale"], d["shift"], backend=be),
         lambda d: ref.quantize_adanorm(d["x"], d["scale"], d["shift"]), _dequantized(2e-2),
         lambda d: _quant_bytes(d, d["scale"], d["shift"]),
         op=quantize.adanorm_op, probe=lambda d: (d["x"], d["scale"], d["shift"], 1e-6, quantize.FP8_SCALE_MAX)),
    Case("quantize_rms_fma", _rms_fma_inputs,
         lambda d, be: quantize.quantize_rms_fma(d["x"], d["y"], d["gate"], inplace=False, backend=be),
         lambda d: ref.quantize_rms_fma(d["x"], d["y"], d["gate"]), _dequantized(2e-2),
         lambda d: _quant_bytes(d, d["y"], d["gate"], d["x"]),
         op=quantize.rms_fma_op,
         probe=lambda d: (d["x"], d["y"], d["gate"], 1e-6, quantize.FP8_SCALE_MAX)),
    Case("gated_attention", _gated_inputs,
         lambda d, be: quantize.gated_attention(d["x"], d["logits"], backend=be),
         lambda d: ref.gated_attention(d["x"], d["logits"]), _dequantized(2e-2),
         lambda d: _quant_bytes(d, d["logits"]),
         op=quantize.gated_op, probe=lambda d: (d["x"], d["logits"], True, quantize.FP8_SCALE_MAX)),
    Case("fp8_gemm_nt", _gemm_inputs,
         lambda d, be: gemm.fp8_gemm_nt(d["a"], d["sa"], d["b"], d["sb"], d["bias"], backend=be),
         lambda d: ref.fp8_gemm_nt(d["a"], d["sa"], d["b"], d["sb"], d["bias"]), _close(3e-3),
         lambda d: (_nbytes(d["a"], d["b"]) + d["a"].shape[0] * d["b"].shape[0] * 2,
                    2.0 * d["a"].shape[0] * d["b"].shape[0] * d["a"].shape[1]),
         op=gemm.gemm_op,
         probe=lambda d: (d["a"], d["sa"], d["b"], d["sb"], d["bias"],
                          torch.empty(d["a"].shape[0], d["b"].shape[0], device=d["a"].device, dtype=BF16))),
    Case("BlockwiseFP8Linear", lambda dev, big: _linear_inputs(dev, big, "fp8"), _linear_run, _linear_reference,
         _close(3e-3), _linear_traffic, why_not_fn=_linear_why_not, auto_fn=_linear_auto, extra=_linear_extra),
    Case("BlockwiseFP6Linear", lambda dev, big: _linear_inputs(dev, big, "fp6"), _linear_run, _linear_reference,
         _close(3e-3), _linear_traffic, why_not_fn=_linear_why_not, auto_fn=_linear_auto, extra=_linear_extra),
    Case("All2All (world 1)", _a2a_inputs, _a2a_run, _a2a_reference, _exact, None,
         why_not_fn=_a2a_why_not, auto_fn=_a2a_auto),
]
