"""Drop-in quantized linear layers with upstream's parameters and state-dict names.

``BlockwiseFP8Linear``: ``weight`` float8_e4m3fn ``[out, in]``, ``weight_scale`` fp32
``[out/128, in/128]`` (amax/448 per 128x128 block), ``bias`` fp32 ``[out]`` or None.
``BlockwiseFP6Linear``: the same with ``weight`` packed FP6, uint8 ``[out, 3*in/4]``, codes
quantized against ``FP6_SCALE_MAX`` so that every code survives packing.

``forward`` takes a float tensor of any leading shape (quantized here, 1x128 blocks) or a
``(q, scales)`` tuple from one of the package's quantize producers, and returns bf16
``[..., out]``. Inference only: no backward, every parameter has ``requires_grad=False``.
"""
from __future__ import annotations

import torch
from torch import nn

from . import _checks as chk
from ._dispatch import resolve_backend_name
from .fp6 import fp6_pack, fp6_unpack
from .gemm import fp8_gemm_nt
from .quantize import FP6_SCALE_MAX, FP8_SCALE_MAX, quantize_blockwise, quantize_weights_blockwise

FP8 = torch.float8_e4m3fn


def _check_features(cls: str, in_features, out_features) -> tuple[int, int]:
    out = []
    for name, v in (("in_features", in_features), ("out_features", out_features)):
        n = chk.integer(f"{cls}: {name}", v)
        if n <= 0 or n % 128:
            raise ValueError(f"{cls}: {name} must be a positive multiple of 128 (the quantization block), got {n}")
        out.append(n)
    return out[0], out[1]


def linear_forward(x, weight_fp8, weight_scale, bias, backend="auto"):
    """``x @ dequant(weight)^T + bias`` through the blockwise FP8 GEMM; x a float tensor
    ``[..., in]`` (also as upstream's ``(x, None)``) or a ``(q, scales)`` pair with scales
    ``[M, in/128]``."""
    k = weight_fp8.shape[1]
    pair = isinstance(x, (tuple, list))
    if pair and len(x) != 2:
        raise ValueError(f"a quantized input must be a (q, scales) pair, got {len(x)} items")
    if pair and x[1] is None:  # upstream's spelling of a float input
        x, pair = x[0], False
    if pair:
        q, scales = x
        chk.tensor("x[0] (q)", q, dtypes=(FP8,), min_ndim=1)
    else:
        chk.tensor("x", x, dtypes=chk.FLOAT_DTYPES, min_ndim=1)
        if x.shape[-1] != k:
            raise ValueError(f"x's last dim must be in_features={k}, got shape {tuple(x.shape)}")
        q, scales = quantize_blockwise(x, backend=backend)
    if q.shape[-1] != k:
        raise ValueError(f"the input's last dim must be in_features={k}, got shape {tuple(q.shape)}")
    leading = q.shape[:-1]
    q2 = q.reshape(-1, k)
    y = fp8_gemm_nt(q2, scales, weight_fp8, weight_scale, bias, backend=backend)
    return y.view(*leading, weight_fp8.shape[0])


class BlockwiseLinear(nn.Module):
    """Base of the blockwise FP8 linears (upstream's class of the same name): an fp32 ``bias``
    ``[out]`` or None; subclasses add ``weight`` / ``weight_scale`` and say how the codes are stored.

    ``dtype`` exists for ``nn.Linear``'s signature and is ignored: the parameter dtypes are fixed
    by the format (upstream's too)."""

    scale_max = FP8_SCALE_MAX

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 backend: str = "auto"):
        super().__init__()
        in_features, out_features = _check_features(type(self).__name__, in_features, out_features)
        if backend not in (None, "auto"):  # (the default's LTX_KERNELS_BACKEND is read per call)
            resolve_backend_name(backend)
        self.in_features, self.out_features, self.backend = in_features, out_features, backend
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=torch.float32, device=device),
                                     requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def _init_weight(self, device) -> None:
        self.weight = nn.Parameter(self._empty_weight(device), requires_grad=False)
        self.weight_scale = nn.Parameter(
            torch.ones(self.out_features // 128, self.in_features // 128, dtype=torch.float32, device=device),
            requires_grad=False)

    def _empty_weight(self, device) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define its weight storage")

    def _store_weight(self, q: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define its weight storage")

    @property
    def fp8weight(self) -> torch.Tensor:
        """The FP8 weight codes ``[out, in]`` the GEMM reads."""
        raise NotImplementedError(f"{type(self).__name__} does not define its weight storage")

    @classmethod
    def from_linear(cls, linear: nn.Linear, transform_weights: bool = True, *, backend: str = "auto"):
        """A layer on ``linear.weight``'s device. ``transform_weights=False`` leaves the weight
        uninitialised (scales ones) for a pre-quantized state dict to be loaded into it."""
        if cls is BlockwiseLinear:
            raise NotImplementedError("BlockwiseLinear is a base class: use BlockwiseFP8Linear or BlockwiseFP6Linear")
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        w = chk.tensor("linear.weight", linear.weight, ndim=2)
        if transform_weights:  # (otherwise only its shape and device are used)
            chk.tensor("linear.weight", w, dtypes=chk.FLOAT_DTYPES)
            bad = int((~torch.isfinite(w.detach())).sum())
            if bad:
                raise ValueError(f"linear.weight holds {bad} non-finite value(s): their 128x128 blocks would get an "
                                 f"infinite scale")
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    device=w.device, backend=backend)
        with torch.no_grad():
            if transform_weights:
                q, s = quantize_weights_blockwise(w.detach(), scale_max=cls.scale_max, backend=backend)
                layer.weight.copy_(layer._store_weight(q))
                layer.weight_scale.copy_(s)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach().float())
        return layer

    def forward(self, x):
        return linear_forward(x, self.fp8weight, self.weight_scale, self.bias, self.backend)

    def _apply(self, fn, recurse=True):
        """A model's dtype casts (``model.to(torch.bfloat16)``, ``.half()``) would turn the FP8 codes
        and fp32 scales into plain floats (nn.Module casts every floating-point parameter): the
        format's tensors keep their dtypes and only follow device moves."""
        kept = {name: p.data for name, p in self._parameters.items() if p is not None}
        super()._apply(fn, recurse)
        for name, before in kept.items():
            p = self._parameters[name]
            if p is not None and p.dtype != before.dtype:
                p.data = before.to(p.device)
        return self

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class BlockwiseFP8Linear(BlockwiseLinear):
    """``nn.Linear`` replacement with 128x128-blockwise FP8 weights and 1x128 FP8 activations."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 backend: str = "auto"):
        super().__init__(in_features, out_features, bias, device, dtype, backend=backend)
        self._init_weight(device)

    def _empty_weight(self, device) -> torch.Tensor:
        return torch.empty(self.out_features, self.in_features, dtype=FP8, device=device)

    def _store_weight(self, q: torch.Tensor) -> torch.Tensor:
        return q

    @property
    def fp8weight(self) -> torch.Tensor:
        return self.weight


class BlockwiseFP6Linear(BlockwiseLinear):
    """FP8 linear whose weight codes are stored packed as FP6 (3/4 of the bytes); unpacked by the
    fast kernel on every forward, as upstream does."""

    scale_max = FP6_SCALE_MAX

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 backend: str = "auto"):
        super().__init__(in_features, out_features, bias, device, dtype, backend=backend)
        self._init_weight(device)

    def _empty_weight(self, device) -> torch.Tensor:
        return torch.empty(self.out_features, self.in_features // 4 * 3, dtype=torch.uint8, device=device)

    def _store_weight(self, q: torch.Tensor) -> torch.Tensor:
        return fp6_pack(q.view(torch.uint8), check=True, backend=self.backend)

    @property
    def fp8weight(self) -> torch.Tensor:
        return fp6_unpack(self.weight, self.in_features, backend=self.backend).view(FP8)
