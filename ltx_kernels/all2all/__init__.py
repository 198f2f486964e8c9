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

import contextlib
import itertools
import math
import socket
import warnings
import weakref

import torch

from .. import _checks as chk
from .. import _ext
from .._dispatch import BackendUnavailable, resolve_backend_name
from . import _ops
from ._buffers import CudaIpcBackend, gpu_uuids, release
from ._common import DEFAULT_TIMEOUT_S, DTYPES, MAX_WORLD, All2AllTimeout, dist
from ._torch_backend import TorchBackend

__all__ = ["All2All", "All2AllTimeout", "DEFAULT_TIMEOUT_S", "DTYPES", "MAX_WORLD"]

_ids = itertools.count()


def _rank_device(device) -> torch.device:
    """The rank's device: ``device``, else the current CUDA device, else the CPU. Only its spelling
    is checked here; whether a CUDA device exists is a rank's own finding, which the constructor
    exchanges (one rank raising alone would leave the others waiting in the exchange)."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must name a torch device, got {device!r} ({e})") from None
    if d.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be a CUDA device or the CPU, got {device!r}")
    if d.type == "cuda" and d.index is None and torch.cuda.is_available():
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _cuda_device_problem(device: torch.device) -> str | None:
    if not torch.cuda.is_available():
        return "this torch has no usable CUDA device"
    if device.index is None or device.index >= torch.cuda.device_count():
        return f"only {torch.cuda.device_count()} CUDA device(s) are visible to this process"
    return None


def _warn_if_one_gpu(infos, world_size):
    """Every rank on one GPU while this process sees at least as many as there are ranks: most
    likely torch.cuda.set_device(local_rank) was not called (the default device is the current
    one)."""
    uuids = {i.get("uuid") or i["device"] for i in infos}
    if world_size > 1 and len(uuids) == 1 and infos[0]["device"].startswith("cuda") and \
            torch.cuda.device_count() >= world_size:
        warnings.warn(f"All2All: all {world_size} ranks are on {infos[0]['device']} of "
                      f"{torch.cuda.device_count()} visible GPUs; call torch.cuda.set_device(local_rank) "
                      f"before building it, or pass device=", stacklevel=3)


class All2All(CudaIpcBackend, TorchBackend):
    """``All2All(rank, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, group=None,
    timeout_seconds=None, *, device=None, backend="auto")``.

    The buffer holds ``seqlen * hidden_dim`` elements per rank (as upstream): every op checks that
    each rank's output fits. ``num_sms`` is the CTA count of the CUDA kernels (at least
    ``world_size``). ``rank`` is the rank in ``group``; it need not equal the device index.
    """

    def __init__(self, rank, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, group=None,
                 timeout_seconds=None, *, device=None, backend="auto", _local_peers=None):
        sizes = {}
        for name, v in (("world_size", world_size), ("seqlen", seqlen), ("hidden_dim", hidden_dim),
                        ("num_sms", num_sms)):
            sizes[name] = chk.integer(name, v)
            if sizes[name] < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        world_size, seqlen, hidden_dim, num_sms = sizes.values()
        rank = chk.integer("rank", rank)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
        if tensor_dtype not in DTYPES:
            raise TypeError(f"tensor_dtype must be one of {[str(d) for d in DTYPES]}, got {tensor_dtype}")
        self.rank, self.world_size, self.seqlen, self.hidden_dim = rank, world_size, seqlen, hidden_dim
        self.num_sms, self.dtype, self.group = num_sms, tensor_dtype, group
        self.device = _rank_device(device)
        self.capacity = seqlen * hidden_dim * torch.empty((), dtype=tensor_dtype).element_size()
        self.counts = [seqlen] * world_size
        self.even = True
        self.broken: All2AllTimeout | None = None
        self._destroyed = False
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
                if not dist().is_available() or not dist().is_initialized():
                    raise ValueError("world_size > 1 needs torch.distributed initialised (or All2All.local_ranks)")
                gw, gr = dist().get_world_size(group), dist().get_rank(group)
                if gw != world_size or gr != rank:
                    raise ValueError(f"rank/world_size ({rank}/{world_size}) disagree with the group ({gr}/{gw})")
            requested = resolve_backend_name(backend)
            # NCCL's object collectives work on the current device: make it this rank's
            with self._device_current():
                infos = self._exchange(self._info())
                self.backend = self._choose_backend(requested, infos)
                if device is None:
                    _warn_if_one_gpu(infos, world_size)
                if self.backend == "cuda":
                    self.backend = self._setup_cuda_ipc(may_fall_back=requested == "auto")
        self.comm_id = next(_ids)
        _ops.registry[self.comm_id] = self
        # (the list itself: handles closed before a release are not closed again)
        self._finalizer = weakref.finalize(self, release, self._ext, self._base, self._opened,
                                           self._host_err, self.device.index)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def local_ranks(cls, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, timeout_seconds=None, *,
                    device=None):
        """All ``world_size`` ranks in this process on one GPU (the "cuda" backend, peer pointers
        handed over directly). Run rank r's ops on its own stream; all ranks' kernels must be
        resident together, so keep ``num_sms * world_size`` within what the GPU holds at once, and
        each stream needs its own hardware queue: set ``CUDA_DEVICE_MAX_CONNECTIONS=32`` before CUDA
        starts (the default is 8) when world_size is 8."""
        shared: dict = {"bases": [None] * world_size}
        return [cls(r, world_size, seqlen, hidden_dim, num_sms, tensor_dtype, None, timeout_seconds,
                    device=device, _local_peers=shared) for r in range(world_size)]

    def _device_current(self):
        usable = self.device.type == "cuda" and _cuda_device_problem(self.device) is None
        return torch.cuda.device(self.device) if usable else contextlib.nullcontext()

    def _info(self):
        """What the other ranks need to know of this one; an error here is exchanged too (every
        rank then raises), so no rank waits in a collective this one never joins."""
        problem = _cuda_device_problem(self.device) if self.device.type == "cuda" else None
        if problem:
            return {"error": f"{self.device}: {problem}"}
        try:
            # Loading may compile the extension: only for a rank that could use it (cuda_reasons
            # reports a rank off CUDA).
            why = _ext.load("_C_all2all")[1] if self.device.type == "cuda" else None
            uuid = gpu_uuids()[self.device.index] if self.device.type == "cuda" else ""
        except Exception as e:
            return {"error": f"{self.device}: {type(e).__name__}: {e}"}
        return {"host": socket.gethostname(), "device": str(self.device), "uuid": uuid, "capacity": self.capacity,
                "ext": why, "dtype": str(self.dtype)}

    def _exchange(self, obj):
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size
        dist().all_gather_object(out, obj, group=self.group)
        return out

    def _choose_backend(self, backend, infos):
        errors = [f"rank {r}: {i['error']}" for r, i in enumerate(infos) if "error" in i]
        if errors:
            raise ValueError(f"All2All: ranks cannot take part: {'; '.join(errors)}")
        if {i["capacity"] for i in infos} != {self.capacity} or {i["dtype"] for i in infos} != {str(self.dtype)}:
            raise ValueError(f"ranks disagree on seqlen*hidden_dim or tensor_dtype: {infos}")
        reasons = {"cuda": self.cuda_reasons(infos), "torch": self.torch_reasons()}
        if self.world_size > 1:  # peer access is seen from each rank's GPU: all ranks must agree
            ranks: dict = {}
            for r, found in enumerate(self._exchange(reasons["cuda"])):
                for why in found:
                    ranks.setdefault(why, []).append(str(r))
            reasons["cuda"] = [f"{why} (rank {', '.join(rs)})" for why, rs in ranks.items()]
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

    # ------------------------------------------------------------------ configuration
    def set_rank_tokens(self, rank_num_tokens):
        """Per-rank token counts (uneven allowed). Host-side only: no device sync."""
        if isinstance(rank_num_tokens, (str, bytes, torch.Tensor)) or not hasattr(rank_num_tokens, "__iter__"):
            raise TypeError(f"rank_num_tokens must be a sequence of {self.world_size} ints, got "
                            f"{type(rank_num_tokens).__name__}")
        counts = [chk.integer(f"rank_num_tokens[{i}]", c) for i, c in enumerate(rank_num_tokens)]
        if len(counts) != self.world_size or any(c < 0 for c in counts):
            raise ValueError(f"rank_num_tokens must be {self.world_size} non-negative ints, got {counts}")
        self.counts = counts
        self.even = len(set(counts)) == 1  # (what torch.compile's graphs are guarded on: see _ops)

    def set_timeout_seconds(self, seconds):
        """How long a kernel waits for a peer before :class:`All2AllTimeout`; None: 10 s.
        0 gives up at the first wait a peer has not already satisfied (upstream's meaning);
        ``float('inf')`` waits forever."""
        t = DEFAULT_TIMEOUT_S if seconds is None else chk.real("timeout_seconds", seconds)
        if not t >= 0:
            raise ValueError(f"seconds must be >= 0 (or None for {DEFAULT_TIMEOUT_S}), got {seconds!r}")
        self.timeout_seconds = t

    # ------------------------------------------------------------------ ops
    def _check_x(self, name, x, op):
        """What does not depend on the token counts (see _check_tokens)."""
        if self._destroyed:
            raise ValueError(f"All2All rank {self.rank}: this instance was destroyed; build a new one")
        chk.tensor(name, x, ndim=4)
        if x.dtype != self.dtype:
            raise TypeError(f"{name} must have this All2All's dtype {self.dtype}, got {x.dtype}")
        if x.device != self.device:
            raise ValueError(f"{name} is on {x.device} but this All2All rank lives on {self.device}")
        b, n, h, d = x.shape
        if b < 1 or d < 1 or h < 1:
            raise ValueError(f"{name} must be a non-empty [B, T, H, D] tensor, got {tuple(x.shape)}")
        if op == "send_recv_heads" and h % self.world_size:
            raise ValueError(f"{name}'s head count {h} must be divisible by world_size {self.world_size}")
        if self.broken is not None:
            raise All2AllTimeout(f"this All2All instance failed earlier and is unusable: {self.broken}",
                                 self.broken.peer)
        return x.contiguous()

    def _check_tokens(self, op, x):
        """x's token count against set_rank_tokens, and every rank's output of ``op`` (the largest
        one, for uneven counts) against its buffer."""
        tokens = sum(self.counts) if op == "gather_heads" else self.counts[self.rank]
        if x.shape[1] != tokens:
            raise ValueError(f"x.shape[1] must be {tokens} tokens (set_rank_tokens: {self.counts}), got {x.shape[1]}")
        shapes = [_ops.out_shape(op, x.shape, self.counts, r) for r in range(self.world_size)]
        sizes = [math.prod(s) for s in shapes]
        shape = shapes[sizes.index(max(sizes))]
        nbytes = max(sizes) * x.element_size()
        if nbytes > self.capacity:
            raise ValueError(f"{op} output {list(shape)} needs {nbytes} bytes but the buffer holds {self.capacity} "
                             f"(seqlen*hidden_dim = {self.seqlen}*{self.hidden_dim} elements); build the All2All larger")

    def _op(self, op, x, copy_out):
        copy_out = chk.flag("copy_out", copy_out)
        x = self._check_x("x", x, op)
        # traced with even counts, the sequence dimension stays symbolic: the op checks the counts
        # when it runs (see _ops)
        if not (torch.compiler.is_compiling() and self.even):
            self._check_tokens(op, x)
        return _ops.call(op, x, self, copy_out)

    def send_recv_heads(self, x, *, copy_out=False):
        """``[B, c_r, H, D]`` -> ``[B, T, H/W, D]`` (this rank's heads of every token)."""
        return self._op("send_recv_heads", x, copy_out)

    def gather_heads(self, x, *, copy_out=False):
        """``[B, T, H/W, D]`` -> ``[B, c_r, H, D]``, the inverse of send_recv_heads."""
        return self._op("gather_heads", x, copy_out)

    def allgather(self, x, *, copy_out=False):
        """``[B, c_r, H, D]`` -> ``[B, T, H, D]``."""
        return self._op("allgather", x, copy_out)

    def out_shape(self, op, shape):
        return _ops.out_shape(op, shape, self.counts, self.rank)

    @property
    def tensor_dtype(self) -> torch.dtype:
        """Upstream's name of ``dtype``."""
        return self.dtype

    @property
    def buffer_size(self) -> int:
        """Upstream's name of ``capacity``: bytes of one rank's buffer (seqlen x hidden_dim)."""
        return self.capacity

    # ------------------------------------------------------------------ errors and teardown
    def check(self):
        """Wait for this rank's queued work, then raise All2AllTimeout if a kernel timed out or a
        peer ran another op or other token counts."""
        if self.backend == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
            self._raise_if_failed()
        elif self.broken is not None:
            raise self.broken

    def destroy(self):
        """Free the buffer (call on every rank once no op is in flight anywhere)."""
        _ops.registry.pop(getattr(self, "comm_id", None), None)
        self._destroyed = True
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
