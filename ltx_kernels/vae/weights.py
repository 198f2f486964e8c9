"""Load-time weight transforms of upstream's VAE API. They are plain torch (no kernel), and
ltx-core runs them while loading a decoder checkpoint for the Blackwell path, so they work here
whatever the GPU."""
from __future__ import annotations

import torch

from .. import _checks as chk


def softmax_row_bound(k_norm_weight: torch.Tensor) -> torch.Tensor:
    """``sqrt(head_dim) * max |k_norm_weight|`` as a 0-d fp32 tensor on the weight's device: a
    bound on ``||k||`` for keys RMS-normed with that weight (RoPE keeps the norm), which the
    attention kernels use as a fixed per-row softmax offset (``q . k <= ||q|| ||k||``)."""
    chk.tensor("k_norm_weight", k_norm_weight, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
    if k_norm_weight.shape[-1] == 0:
        raise ValueError("k_norm_weight must not be empty")
    return k_norm_weight.detach().float().abs().amax() * float(k_norm_weight.shape[-1]) ** 0.5


def pack_fused_ctx_weights(w_upsample: torch.Tensor, b_upsample: torch.Tensor, w_ctx: torch.Tensor,
                           b_ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``context_proj(pixel_shuffle(upsample(x)))`` as one Linear per subpixel, stacked.

    The upsample ``[P*C, Ctx]`` writes channel c of subpixel s at row ``c*P + s`` (the pixel
    shuffle only permutes rows), so subpixel s is the Linear ``w_ctx @ w_up[s::P]`` with bias
    ``w_ctx @ b_up[s::P] + b_ctx``. Returns ``([P*C, Ctx], [P*C])``, subpixel-major, in
    ``w_ctx``'s / ``b_ctx``'s dtypes on ``w_ctx``'s device; the sums run in fp32. ``w_ctx`` must be
    square ``[C, C]``."""
    for name, t, nd in (("w_upsample", w_upsample, 2), ("b_upsample", b_upsample, 1), ("w_ctx", w_ctx, 2),
                        ("b_ctx", b_ctx, 1)):
        chk.tensor(name, t, dtypes=chk.FLOAT_DTYPES + (torch.float64,), ndim=nd)
    c, ctx = w_ctx.shape[0], w_upsample.shape[1]
    if w_ctx.shape[1] != c:
        raise ValueError(f"w_ctx (context_proj) must be square [C, C], got {tuple(w_ctx.shape)}")
    if w_upsample.shape[0] % c or w_upsample.shape[0] == 0:
        raise ValueError(f"w_upsample's rows {w_upsample.shape[0]} must be a positive multiple of C = {c}")
    p = w_upsample.shape[0] // c
    if b_upsample.shape[0] != p * c or b_ctx.shape[0] != c:
        raise ValueError(f"b_upsample must have {p * c} entries and b_ctx {c}, got {b_upsample.shape[0]} and "
                         f"{b_ctx.shape[0]}")
    dev = w_ctx.device
    wc = w_ctx.detach().float()
    w_up = w_upsample.detach().to(dev, torch.float32).view(c, p, ctx)  # [c, s, :] = row c*P + s
    b_up = b_upsample.detach().to(dev, torch.float32).view(c, p)
    w = torch.einsum("ij,jsk->sik", wc, w_up)  # [s, C, Ctx]: w_ctx @ (subpixel s's rows)
    b = b_up.t() @ wc.t() + b_ctx.detach().to(dev, torch.float32)  # [s, C]
    return w.reshape(p * c, ctx).to(w_ctx.dtype), b.reshape(p * c).to(b_ctx.dtype)
