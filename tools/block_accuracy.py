"""Accuracy (and, on a GPU, speed) of one LTX-2-sized video transformer block, bf16 vs quantized.

The block: AdaLN (rms_norm * (1 + scale) + shift) -> q/k/v projections -> q/k RMSNorm + split
RoPE -> attention -> output projection -> gated residual -> AdaLN -> FFN 4096->16384 -> tanh GELU
-> 16384->4096 -> gated residual. Random weights (nn.Linear's init), random modulation.
"bf16" uses nn.Linear in bf16; "fp8"/"fp6" swap every linear for BlockwiseFP8Linear /
BlockwiseFP6Linear fed by the package's fused producers (quantize_adanorm, GELU+quantize).

    python tools/block_accuracy.py [--tokens 1024] [--json out.json] [--time]

Reports, against an fp32 run of the same block: relative error (Frobenius) of the attention
branch (output projection), of the FFN branch and of the block output, for bf16, FP8 and FP6. ``--time`` (GPU) adds the median
CUDA-graph replay time of each variant.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import torch
import torch.nn.functional as F
from torch import nn

import ltx_kernels as lk

H, HEADS, FFN = 4096, 32, 16384
DH = H // HEADS


class VideoBlock(nn.Module):
    def __init__(self, device):
        super().__init__()
        mk = lambda i, o: nn.Linear(i, o, device=device)  # noqa: E731
        self.q, self.k, self.v, self.o = mk(H, H), mk(H, H), mk(H, H), mk(H, H)
        self.ff1, self.ff2 = mk(H, FFN), mk(FFN, H)
        self.q_norm = nn.Parameter(1 + 0.1 * torch.randn(H, device=device))
        self.k_norm = nn.Parameter(1 + 0.1 * torch.randn(H, device=device))
        self.mod = nn.Parameter(0.1 * torch.randn(6, H, device=device))  # scale1, shift1, gate1, ...
        self.quant = None

    def quantized(self, cls):
        import copy

        blk = copy.deepcopy(self)
        if cls is None:
            return blk.to(torch.bfloat16)
        for name in ("q", "k", "v", "o", "ff1", "ff2"):
            setattr(blk, name, cls.from_linear(getattr(self, name)))
        blk.quant = cls
        return blk

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        sc1, sh1, g1, sc2, sh2, g2 = (m.to(x.dtype) for m in self.mod)
        if self.quant is None:
            h = lk.reference.rms_norm(x.float(), 1e-6).to(x.dtype) * (1 + sc1) + sh1
        else:
            h = lk.quantize_adanorm(x, sc1.view(1, 1, H), sh1.view(1, 1, H))
        q = lk.rms_norm_split_rope(self.q(h), cos, sin, self.q_norm.to(x.dtype))
        k = lk.rms_norm_split_rope(self.k(h), cos, sin, self.k_norm.to(x.dtype))
        v = self.v(h)
        heads = lambda u: u.view(b, t, HEADS, DH).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v)).transpose(1, 2).reshape(b, t, H)
        attn_out = self.o(a)
        x = x + attn_out * g1
        if self.quant is None:
            h = lk.reference.rms_norm(x.float(), 1e-6).to(x.dtype) * (1 + sc2) + sh2
            f = self.ff2(F.gelu(self.ff1(h), approximate="tanh"))
        else:
            h = lk.quantize_adanorm(x, sc2.view(1, 1, H), sh2.view(1, 1, H))
            f = self.ff2(lk.quantize_blockwise(self.ff1(h), gelu=True))
        return x + f * g2, attn_out, f


def rope(t, device, dtype):
    pos = torch.arange(t, device=device, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(DH // 2, device=device, dtype=torch.float32) / (DH // 2))
    ang = pos[:, None] * inv[None]  # [T, Dh/2], the same for every head
    c = ang.cos()[None, None].expand(1, HEADS, t, DH // 2).to(dtype)
    s = ang.sin()[None, None].expand(1, HEADS, t, DH // 2).to(dtype)
    return c, s


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def graph_ms(fn, iters=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    ts = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return sorted(ts)[len(ts) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--json")
    ap.add_argument("--time", action="store_true", help="also time each variant (CUDA graph replay)")
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    ref32 = VideoBlock(dev)
    x32 = torch.randn(1, args.tokens, H, device=dev)
    cos32, sin32 = rope(args.tokens, dev, torch.float32)
    with torch.no_grad():
        y32, a32, f32 = ref32(x32, cos32, sin32)
        x, cos, sin = x32.bfloat16(), cos32.bfloat16(), sin32.bfloat16()
        variants = {"bf16": ref32.quantized(None), "fp8": ref32.quantized(lk.BlockwiseFP8Linear),
                    "fp6": ref32.quantized(lk.BlockwiseFP6Linear)}
        res = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu",
               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "tokens": args.tokens, "dims": {"hidden": H, "heads": HEADS, "ffn": FFN}, "variants": {}}
        for name, blk in variants.items():
            y, a, f = blk(x, cos, sin)
            r = {"rel_err_attn_branch": rel(a, a32), "rel_err_ffn_branch": rel(f, f32), "rel_err_out": rel(y, y32),
                 "finite": bool(torch.isfinite(y).all())}
            if args.time and dev.type == "cuda":
                r["graph_ms"] = graph_ms(lambda: blk(x, cos, sin))
            res["variants"][name] = r
            print(f"{name:5s} " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
