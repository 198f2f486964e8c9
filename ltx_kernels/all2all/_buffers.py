"""The "cuda" backend: one IPC-shareable buffer per rank (csrc/all2all), the peers' buffers opened
through CUDA IPC (or handed over directly when one process hosts every rank), a host-mapped error
word the kernel writes when a peer does not arrive, and the launch. Protocol: docs/all2all.md."""
from __future__ import annotations

import math
import os

import torch

from .. import _ext
from .._dispatch import BackendUnavailable
from . import _ops
from ._common import MAX_WORLD, All2AllTimeout, dist

_PHASES = {1: "entry handshake: it never became ready to receive", 2: "its data never arrived"}


def _local_hint(a2a) -> str:
    """What to check when one process hosts every rank (All2All.local_ranks): the ranks' kernels
    wait for each other, so their streams must reach the GPU through distinct hardware queues.
    There are CUDA_DEVICE_MAX_CONNECTIONS of them (8 unless set before CUDA starts); W = 8 ranks
    on 8 queues timed out under compute-sanitizer and ran with 32."""
    if not getattr(a2a, "_local", False):
        return ""
    have = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8 (the default)")
    return (f" All ranks share this process: each rank's stream needs its own hardware queue; "
            f"CUDA_DEVICE_MAX_CONNECTIONS is {have}, set it to 32 before CUDA starts.")


class CudaIpcBackend:
    """Mixed into :class:`All2All`: the buffers, the IPC handles and the kernel launch."""

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
        self._local = True
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
            dist().barrier(group=self.group)

    def _raise_if_failed(self):
        if self.broken is not None:
            raise self.broken
        code, peer, phase, epoch = self._ext.host_error_read(self._host_err)
        if code:
            self.broken = All2AllTimeout(
                f"All2All rank {self.rank}: peer rank {peer} did not arrive within {self.timeout_seconds:g}s "
                f"({_PHASES.get(phase, phase)}; op #{epoch} of this instance). The kernel exited, the CUDA "
                f"context is fine; destroy this instance and build a new one." + _local_hint(self), int(peer))
            raise self.broken

    def _run_cuda(self, op, x, copy_out):
        self._raise_if_failed()
        shape = self.out_shape(op, x.shape)
        heads = x.shape[2] * (self.world_size if op == "gather_heads" else 1)  # H of the full tensor
        self._ext.launch(_ops.OPS[op], x, self._bases, self.capacity, self.rank, self.counts, heads,
                         self.num_sms, self.timeout_seconds, self._host_err)
        out = self._buf[: math.prod(shape) * x.element_size()].view(self.dtype).view(shape)
        return out.clone() if copy_out else out


def release(ext, base, opened, host_err, device_index):
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
