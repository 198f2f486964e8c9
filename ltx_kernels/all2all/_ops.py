"""The All2All ops as ``torch.library`` ops: their fakes give the exact output shapes for uneven
token counts, so ``torch.compile(fullgraph=True)`` traces through them. An op carries the id of its
instance, looked up in ``registry``."""
from __future__ import annotations

import torch

OPS = {"send_recv_heads": 0, "gather_heads": 1, "allgather": 2}
registry: dict = {}


def full_heads(op: str, x_shape, world: int) -> int:
    """H of the full tensor for an input of ``op`` (gather_heads takes H / W heads a rank)."""
    return x_shape[2] * (world if op == "gather_heads" else 1)


def op_signature(op: str, x: torch.Tensor, counts) -> int:
    """What every rank of one collective op agrees on (the op, B, H of the full tensor, D, the
    element size and every rank's token count; not this rank's own token count), as a 63-bit
    number the ranks compare (the cuda kernel; the torch backend over gloo). ``hash`` of a tuple
    of ints is the same in every process (no string hashing, so PYTHONHASHSEED plays no part)."""
    b, _, _, d = x.shape
    key = (OPS[op], b, full_heads(op, x.shape, len(counts)), d, x.element_size(), tuple(counts))
    return hash(key) & ((1 << 63) - 1)


def _impl(op):
    def run(x: torch.Tensor, comm_id: int, counts: list[int], rank: int, copy_out: bool) -> torch.Tensor:
        inst = registry[comm_id]
        if inst.backend == "cuda":
            return inst._run_cuda(op, x, copy_out)
        return inst._run_torch(op, x, copy_out)

    return run


def out_shape(op, shape, counts, rank):
    """The output shape of ``op`` on rank ``rank`` for an input ``shape``: one rule for the real
    ops and their fakes, exact for uneven counts."""
    b, n, h, d = shape
    w, t = len(counts), sum(counts)
    if op == "send_recv_heads":
        return (b, t, h // w, d)
    if op == "gather_heads":
        return (b, counts[rank], h * w, d)
    return (b, t, h, d)


def _fake(op):
    def fake(x, comm_id, counts, rank, copy_out):
        return x.new_empty(out_shape(op, x.shape, counts, rank))

    return fake


_custom = {}
for _op in OPS:
    _impl_fn = _impl(_op)
    _c = torch.library.custom_op(f"ltx_kernels::all2all_{_op}", _impl_fn, mutates_args=())
    _c.register_fake(_fake(_op))
    _custom[_op] = (_c, _impl_fn)


def call(op, x, inst, copy_out):
    c, impl = _custom[op]
    args = (x, inst.comm_id, list(inst.counts), inst.rank, bool(copy_out))
    if torch.compiler.is_compiling():
        return c(*args)
    return impl(*args)
