"""Head redistribution for sequence parallelism (upstream's ``All2All``, without its traps).

Ranks hold ``[B, c_r, H, D]`` (c_r tokens each, uneven counts allowed, T = sum c):

* ``send_recv_heads(x)`` -> ``[B, T, H/W, D]``: all tokens, this rank's H/W heads
  (rank t gets heads ``t*H/W .. (t+1)*H/W``; tokens in rank order).
* ``gather_heads(y)``: the exact inverse, ``[B, T, H/W, D]`` -> ``[B, c_r, H, D]``.
* ``allgather(x)`` -> ``[B, T, H, D]``.

Backends:

* ``"cuda"``: CUDA-IPC kernels (csrc/all2all) for ranks of one node. Peers write into each other's
  buffer; an entry handshake and monotonically increasing epochs order back-to-back ops; a peer
  that does not arrive within ``timeout_seconds`` makes the kernel exit and the host raise
  :class:`All2AllTimeout` naming it (the CUDA context stays usable). ``copy_out=False`` returns a
  view of this rank's buffer, valid until the next op on this instance (as upstream). Issue one
  instance's ops in stream order (one stream, or streams synchronised between ops): each launch
  reads the epoch its predecessor left on the device.
* ``"torch"``: the same semantics through ``torch.distributed`` (``all_to_all_single`` /
  ``all_gather``: NCCL on GPUs, gloo on CPU); for multi-node groups, GPUs without peer access
  and CPU. Always returns fresh tensors.

``"auto"`` picks ``"cuda"`` when the extension is built and every rank of the group is a CUDA
device on this host, else ``"torch"``. One process can also host all W ranks of one GPU
(:meth:`All2All.local_ranks`): each rank's kernel runs on its own stream, which is how the
kernels and the barrier are tested on a single GPU.
"""
from __future__ import annotations

import datetime
import itertools
import math
import socket
import weakref

import torch

from . import _checks as chk
from . import _ext
from ._dispatch import BackendUnavailable, resolve_backend_name

DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float16, torch.float32)
MAX_WORLD = 8
DEFAULT_TIMEOUT_S = 10.0
_OPS = {"send_recv_heads": 0, "gather_heads": 1, "allgather": 2}
_PHASES = {1: "entry handshake: it never became ready to receive", 2: "its data never arrived"}


class All2AllTimeout(TimeoutError):
    """A peer did not arrive in time. ``peer`` is its rank (None when unknown)."""

    def __init__(self, msg: str, peer: int | None = None):
        super().__init__(msg)
        self.peer = peer


_registry: dict[int, "All2All"] = {}
_ids = itertools.count()


def _dist():
    import torch.distributed as dist

    return dist


def _prefix(counts):
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out, acc


class All2All:
    """``All2All(rank, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, group=None,
    timeout_seconds=None, *, device=None, backend="auto")``.

    The buffer holds ``seqlen * hidden_dim`` elements per rank (as upstream): every op checks that
    each rank's output fits. ``num_sms`` is the CTA count of the CUDA kernels (at least
    ``world_size``). ``rank`` is the rank in ``group``; it need not equal the device index.
    """

    def __init__(self, rank, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, group=None,
                 timeout_seconds=None, *, device=None, backend="auto", _local_peers=None):
        for name, v in (("world_size", world_size), ("seqlen", seqlen), ("hidden_dim", hidden_dim),
                        ("num_sms", num_sms)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
        if tensor_dtype not in DTYPES:
            raise TypeError(f"tensor_dtype must be one of {[str(d) for d in DTYPES]}, got {tensor_dtype}")
        self.rank, self.world_size, self.seqlen, self.hidden_dim = rank, world_size, seqlen, hidden_dim
        self.num_sms, self.dtype, self.group = num_sms, tensor_dtype, group
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.capacity = seqlen * hidden_dim * torch.empty((), dtype=tensor_dtype).element_size()
        self.counts = [seqlen] * world_size
        self.broken: All2AllTimeout | None = None
        self._ext = None
        self._base = None
        self._opened: list[int] = []
        self._host_err = None
        self.set_timeout_seconds(timeout_seconds)

        if _local_peers is not None:  # built by local_ranks(): one process hosts every rank
            self.backend = "cuda"
            self._setup_cuda_local(_local_peers)
        else:
            if world_size > 1:
                dist = _dist()
                if not dist.is_available() or not dist.is_initialized():
                    raise ValueError("world_size > 1 needs torch.distributed initialised (or All2All.local_ranks)")
                gw, gr = dist.get_world_size(group), dist.get_rank(group)
                if gw != world_size or gr != rank:
                    raise ValueError(f"rank/world_size ({rank}/{world_size}) disagree with the group ({gr}/{gw})")
            infos = self._exchange(self._info())
            self.backend = self._choose_backend(resolve_backend_name(backend), infos)
            if self.backend == "cuda":
                self._setup_cuda_ipc(infos)
        self.comm_id = next(_ids)
        _registry[self.comm_id] = self
        self._finalizer = weakref.finalize(self, _release, self._ext, self._base, list(self._opened),
                                           self._host_err, self.device.index)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def local_ranks(cls, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, timeout_seconds=None, *,
                    device=None):
        """All ``world_size`` ranks in this process on one GPU (the "cuda" backend, peer pointers
        handed over directly). Run rank r's ops on its own stream; all ranks' kernels must be
        resident together, so keep ``num_sms * world_size`` within what the GPU holds at once."""
        shared: dict = {"bases": [None] * world_size}
        return [cls(r, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, None, timeout_seconds,
                    device=device, _local_peers=shared) for r in range(world_size)]

    def _info(self):
        # Loading may compile the extension: only for a rank that could use it (cuda_reasons
        # reports a rank off CUDA).
        why = _ext.load("_C_all2all")[1] if self.device.type == "cuda" else None
        return {"host": socket.gethostname(), "device": str(self.device), "capacity": self.capacity,
                "ext": why, "dtype": str(self.dtype)}

    def _exchange(self, obj):
        if self.world_size == 1:
            return [obj]
        dist = _dist()
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _choose_backend(self, backend, infos):
        if {i["capacity"] for i in infos} != {self.capacity} or {i["dtype"] for i in infos} != {str(self.dtype)}:
            raise ValueError(f"ranks disagree on seqlen*hidden_dim or tensor_dtype: {infos}")
        reasons = {"cuda": self.cuda_reasons(infos), "torch": self.torch_reasons()}
        if backend == "auto":
            for b in ("cuda", "torch"):
                if not reasons[b]:
                    return b
            raise BackendUnavailable("All2All: no backend can run here: " +
                                     "; ".join(f"{k}: {', '.join(v)}" for k, v in reasons.items()))
        if backend not in reasons:
            raise BackendUnavailable(f"All2All: backend {backend!r} is not implemented (have: cuda, torch)")
        if reasons[backend]:
            raise BackendUnavailable(f"All2All: backend {backend!r} cannot run here: {'; '.join(reasons[backend])}")
        return backend

    def cuda_reasons(self, infos) -> list:
        r = []
        bad_ext = [i["ext"] for i in infos if i["ext"]]
        if bad_ext:
            r.append(bad_ext[0])
        if any(not i["device"].startswith("cuda") for i in infos):
            r.append("needs every rank on a CUDA device")
        if len({i["host"] for i in infos}) > 1:
            r.append("ranks span several hosts (CUDA IPC is single-node)")
        if self.world_size > MAX_WORLD:
            r.append(f"world_size {self.world_size} > {MAX_WORLD}")
        if self.num_sms < self.world_size:
            r.append(f"num_sms={self.num_sms} < world_size={self.world_size} (each target needs a CTA)")
        if not r and self.device.type == "cuda":
            idx = {int(i["device"].split(":")[1]) for i in infos}
            me = self.device.index
            blocked = [d for d in idx if d != me and not torch.cuda.can_device_access_peer(me, d)]
            if blocked:
                r.append(f"no peer access from cuda:{me} to {['cuda:%d' % d for d in blocked]}")
        return r

    def torch_reasons(self) -> list:
        if self.world_size == 1:
            return []
        dist = _dist()
        return [] if dist.is_available() and dist.is_initialized() else ["torch.distributed is not initialised"]

    @staticmethod
    def run_local(ranks, streams, op, inputs, **kwargs):
        """Issue ``op`` for every rank of :meth:`local_ranks` on its own stream (their kernels
        wait for each other, so they must run concurrently), joined back into the current stream."""
        main = torch.cuda.current_stream()
        outs = []
        for a2a, s, x in zip(ranks, streams, inputs):
            s.wait_stream(main)
            with torch.cuda.stream(s):
                outs.append(getattr(a2a, op)(x, **kwargs))
        for s in streams:
            main.wait_stream(s)
        return outs

    def _setup_cuda_common(self):
        mod, why = _ext.load("_C_all2all")
        if mod is None:
            raise BackendUnavailable(f"All2All: backend 'cuda' cannot run here: {why}")
        if self.device.type != "cuda":
            raise ValueError(f"the cuda backend needs a CUDA device, got {self.device}")
        self._ext = mod
        self._base = mod.alloc_block(self.capacity, self.device.index)
        self._host_err = mod.host_error_alloc()
        self._buf = mod.buffer_view(self._base, self.capacity, self.device.index)

    def _setup_cuda_local(self, shared):
        if self.world_size > MAX_WORLD:
            raise ValueError(f"world_size must be <= {MAX_WORLD}, got {self.world_size}")
        if self.num_sms < self.world_size:
            raise ValueError(f"num_sms must be >= world_size ({self.world_size}), got {self.num_sms}")
        self._setup_cuda_common()
        shared["bases"][self.rank] = self._base
        self._bases = shared["bases"]  # filled in by the other ranks' constructors

    def _setup_cuda_ipc(self, infos):
        self._setup_cuda_common()
        handles = self._exchange(self._ext.ipc_handle(self._base, self.device.index))
        bases = []
        for r, h in enumerate(handles):
            if r == self.rank:
                bases.append(self._base)
            else:
                ptr = self._ext.ipc_open(h, self.device.index)
                self._opened.append(ptr)
                bases.append(ptr)
        self._bases = bases
        if self.world_size > 1:  # every rank has opened every peer before anyone launches
            _dist().barrier(group=self.group)

    # ------------------------------------------------------------------ configuration
    def set_rank_tokens(self, counts):
        """Per-rank token counts (uneven allowed). Host-side only: no device sync."""
        counts = [int(c) for c in counts]
        if len(counts) != self.world_size or any(c < 0 for c in counts):
            raise ValueError(f"counts must be {self.world_size} non-negative ints, got {counts}")
        self.counts = counts

    def set_timeout_seconds(self, timeout_seconds):
        """None: 10 s. Must be > 0; ``float('inf')`` waits forever."""
        t = DEFAULT_TIMEOUT_S if timeout_seconds is None else float(timeout_seconds)
        if not t > 0:
            raise ValueError(f"timeout_seconds must be > 0 (or None for {DEFAULT_TIMEOUT_S}), got {timeout_seconds!r}")
        self.timeout_seconds = t

    # ------------------------------------------------------------------ ops
    def _check_x(self, name, x, tokens, heads_div):
        chk.tensor(name, x, ndim=4)
        if x.dtype != self.dtype:
            raise TypeError(f"{name} must have this All2All's dtype {self.dtype}, got {x.dtype}")
        if x.device != self.device:
            raise ValueError(f"{name} is on {x.device} but this All2All rank lives on {self.device}")
        b, n, h, d = x.shape
        if b < 1 or d < 1 or h < 1:
            raise ValueError(f"{name} must be a non-empty [B, T, H, D] tensor, got {tuple(x.shape)}")
        if n != tokens:
            raise ValueError(f"{name}.shape[1] must be {tokens} tokens (set_rank_tokens: {self.counts}), got {n}")
        if heads_div and h % self.world_size:
            raise ValueError(f"{name}'s head count {h} must be divisible by world_size {self.world_size}")
        if self.broken is not None:
            raise All2AllTimeout(f"this All2All instance timed out earlier and is unusable: {self.broken}",
                                 self.broken.peer)
        return x.contiguous()

    def _check_fits(self, op, x):
        """Every rank's output of ``op`` (the largest one, for uneven counts) must fit its buffer."""
        shapes = [_out_shape(op, x.shape, self.counts, r) for r in range(self.world_size)]
        sizes = [math.prod(s) for s in shapes]
        shape = shapes[sizes.index(max(sizes))]
        nbytes = max(sizes) * x.element_size()
        if nbytes > self.capacity:
            raise ValueError(f"{op} output {list(shape)} needs {nbytes} bytes but the buffer holds {self.capacity} "
                             f"(seqlen*hidden_dim = {self.seqlen}*{self.hidden_dim} elements); build the All2All larger")

    def send_recv_heads(self, x, *, copy_out=False):
        """``[B, c_r, H, D]`` -> ``[B, T, H/W, D]`` (this rank's heads of every token)."""
        x = self._check_x("x", x, self.counts[self.rank], True)
        self._check_fits("send_recv_heads", x)
        return _call("send_recv_heads", x, self, copy_out)

    def gather_heads(self, y, *, copy_out=False):
        """``[B, T, H/W, D]`` -> ``[B, c_r, H, D]``, the inverse of send_recv_heads."""
        y = self._check_x("y", y, sum(self.counts), False)
        self._check_fits("gather_heads", y)
        return _call("gather_heads", y, self, copy_out)

    def allgather(self, x, *, copy_out=False):
        """``[B, c_r, H, D]`` -> ``[B, T, H, D]``."""
        x = self._check_x("x", x, self.counts[self.rank], False)
        self._check_fits("allgather", x)
        return _call("allgather", x, self, copy_out)

    def out_shape(self, op, shape):
        return _out_shape(op, shape, self.counts, self.rank)

    # ------------------------------------------------------------------ errors and teardown
    def check(self):
        """Wait for this rank's queued work, then raise All2AllTimeout if a kernel timed out."""
        if self.backend == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
            self._raise_if_failed()

    def _raise_if_failed(self):
        if self.broken is not None:
            raise self.broken
        code, peer, phase, epoch = self._ext.host_error_read(self._host_err)
        if code:
            self.broken = All2AllTimeout(
                f"All2All rank {self.rank}: peer rank {peer} did not arrive within {self.timeout_seconds:g}s "
                f"({_PHASES.get(phase, phase)}; op #{epoch} of this instance). The kernel exited, the CUDA "
                f"context is fine; destroy this instance and build a new one.", int(peer))
            raise self.broken

    def destroy(self):
        """Free the buffer (call on every rank once no op is in flight anywhere)."""
        _registry.pop(getattr(self, "comm_id", None), None)
        if self._finalizer.alive:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __repr__(self):
        return (f"All2All(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device}, dtype={self.dtype}, counts={self.counts})")

    # ------------------------------------------------------------------ backends
    def _run_cuda(self, op, x, copy_out):
        self._raise_if_failed()
        shape = self.out_shape(op, x.shape)
        heads = x.shape[2] * (self.world_size if op == "gather_heads" else 1)  # H of the full tensor
        self._ext.launch(_OPS[op], x, self._bases, self.capacity, self.rank, self.counts, heads,
                         self.num_sms, self.timeout_seconds, self._host_err)
        out = self._buf[: math.prod(shape) * x.element_size()].view(self.dtype).view(shape)
        return out.clone() if copy_out else out

    def _wait(self, work, what):
        if work is None:
            return
        if self.device.type == "cpu":  # gloo honours a per-op timeout; NCCL would block the host for it
            try:
                work.wait(timeout=datetime.timedelta(seconds=min(self.timeout_seconds, 1e9)))
            except RuntimeError as e:
                msg = str(e).lower()
                if "timed out" in msg or "timeout" in msg or "connection" in msg:
                    self.broken = All2AllTimeout(
                        f"All2All rank {self.rank}: torch.distributed {what} did not complete within "
                        f"{self.timeout_seconds:g}s: a peer did not arrive ({str(e)[:200]})")
                    raise self.broken from e
                raise
        else:
            work.wait()

    def _run_torch(self, op, x, copy_out):
        w, r, counts = self.world_size, self.rank, self.counts
        offs, t = _prefix(counts)
        b, n, h, d = x.shape
        if w == 1:
            out = x if op != "gather_heads" else x.view(b, n, h, d)
            return out.clone()
        dist = _dist()
        raw = lambda u: u.contiguous().view(torch.uint8).reshape(-1)  # noqa: E731  (gloo has no fp8)
        per_tok = h * d * x.element_size()
        if op == "send_recv_heads":
            hpr = h // w
            inp = x.view(b, n, w, hpr, d).permute(2, 0, 1, 3, 4)
            out = torch.empty(b * t * hpr * d * x.element_size(), dtype=torch.uint8, device=x.device)
            tok = hpr * d * x.element_size()
            work = dist.all_to_all_single(out, raw(inp), [b * c * tok for c in counts], [b * n * tok] * w,
                                          group=self.group, async_op=True)
            self._wait(work, "all_to_all_single")
            parts = torch.split(out, [b * c * tok for c in counts])
            return torch.cat([p.view(self.dtype).view(b, c, hpr, d) for p, c in zip(parts, counts)], dim=1)
        if op == "gather_heads":
            hpr, c_r = h, counts[r]
            tok = hpr * d * x.element_size()
            inp = torch.cat([raw(x[:, offs[s]:offs[s] + counts[s]]) for s in range(w)])
            out = torch.empty(w * b * c_r * tok, dtype=torch.uint8, device=x.device)
            work = dist.all_to_all_single(out, inp, [b * c_r * tok] * w, [b * c * tok for c in counts],
                                          group=self.group, async_op=True)
            self._wait(work, "all_to_all_single")
            blocks = out.view(self.dtype).view(w, b, c_r, hpr, d)
            return blocks.permute(1, 2, 0, 3, 4).reshape(b, c_r, w * hpr, d)
        cmax = max(counts)
        pad = torch.zeros(b, cmax, h, d, dtype=x.dtype, device=x.device)
        pad[:, :n] = x
        gathered = [torch.empty(b * cmax * per_tok, dtype=torch.uint8, device=x.device) for _ in range(w)]
        work = dist.all_gather(gathered, raw(pad), group=self.group, async_op=True)
        self._wait(work, "all_gather")
        return torch.cat([g.view(self.dtype).view(b, cmax, h, d)[:, :c] for g, c in zip(gathered, counts)], dim=1)


def _release(ext, base, opened, host_err, device_index):
    if ext is None:
        return
    try:
        torch.cuda.synchronize(device_index)
        for p in opened:
            ext.ipc_close(p, device_index)
        if base is not None:
            ext.free_block(base, device_index)
        if host_err is not None:
            ext.host_error_free(host_err)
    except Exception:  # teardown at interpreter exit: nothing left to report to
        pass


# ---------------------------------------------------------------------------------------------
# torch.library ops (fakes give the exact shapes for uneven counts, so torch.compile traces them)

def _impl(op):
    def run(x: torch.Tensor, comm_id: int, counts: list[int], rank: int, copy_out: bool) -> torch.Tensor:
        inst = _registry[comm_id]
        if inst.backend == "cuda":
            return inst._run_cuda(op, x, copy_out)
        return inst._run_torch(op, x, copy_out)

    return run


def _out_shape(op, shape, counts, rank):
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
        return x.new_empty(_out_shape(op, x.shape, counts, rank))

    return fake


_custom = {}
for _op in _OPS:
    _impl_fn = _impl(_op)
    _c = torch.library.custom_op(f"ltx_kernels::all2all_{_op}", _impl_fn, mutates_args=())
    _c.register_fake(_fake(_op))
    _custom[_op] = (_c, _impl_fn)


def _call(op, x, inst, copy_out):
    c, impl = _custom[op]
    args = (x, inst.comm_id, list(inst.counts), inst.rank, bool(copy_out))
    if torch.compiler.is_compiling():
        return c(*args)
    return impl(*args)
