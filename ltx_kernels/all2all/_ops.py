"""The All2All ops as ``torch.library`` ops, so ``torch.compile(fullgraph=True)`` traces through
them. An op carries the id of its instance, looked up in ``registry``.

Two forms. With every rank holding the same token count (sequence parallelism's split), the op
takes no counts: its fake derives the output from ``x``'s shape (T = W * c), so a dynamic sequence
dimension stays symbolic and one graph serves every length, and the counts are checked when it
runs. With uneven counts the op takes them, and its fake gives the exact shapes (a graph per set
of counts)."""
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


def _instance(comm_id):
    inst = registry.get(comm_id)
    if inst is None:
        raise ValueError(f"All2All instance #{comm_id} was destroyed; build a new one")
    return inst


def _run(inst, op, x, copy_out):
    if inst.backend == "cuda":
        return inst._run_cuda(op, x, copy_out)
    return inst._run_torch(op, x, copy_out)


def _impl(op):
    def run(x: torch.Tensor, comm_id: int, counts: list[int], rank: int, copy_out: bool) -> torch.Tensor:
        return _run(_instance(comm_id), op, x, copy_out)

    return run


def _impl_even(op):
    def run(x: torch.Tensor, comm_id: int, world: int, copy_out: bool) -> torch.Tensor:
        inst = _instance(comm_id)
        inst._check_tokens(op, x)  # what tracing left out: the counts
        return _run(inst, op, x, copy_out)

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


def even_out_shape(op, shape, world):
    """out_shape when every rank holds the same count: shape[1], or for gather_heads shape[1] / W
    (its input holds all T = W * c tokens)."""
    c = shape[1] // world if op == "gather_heads" else shape[1]
    return out_shape(op, shape, [c] * world, 0)


def _fake_even(op):
    def fake(x, comm_id, world, copy_out):
        return x.new_empty(even_out_shape(op, x.shape, world))

    return fake


_custom, _custom_even = {}, {}
for _op in OPS:
    _c = torch.library.custom_op(f"ltx_kernels::all2all_{_op}", _impl(_op), mutates_args=())
    _c.register_fake(_fake(_op))
    _custom[_op] = _c
    _c = torch.library.custom_op(f"ltx_kernels::all2all_{_op}_even", _impl_even(_op), mutates_args=())
    _c.register_fake(_fake_even(_op))
    _custom_even[_op] = _c


def call(op, x, inst, copy_out):
    """Eager: the implementation itself (the instance checked x already). Traced: the even form
    while the instance's counts are even (``inst.even``: a bool the graph is guarded on, where
    reading the counts would specialize the sequence dimension), else the form with counts."""
    if not torch.compiler.is_compiling():
        return _run(inst, op, x, copy_out)
    if inst.even:
        return _custom_even[op](x, inst.comm_id, inst.world_size, bool(copy_out))
    return _custom[op](x, inst.comm_id, list(inst.counts), inst.rank, bool(copy_out))
