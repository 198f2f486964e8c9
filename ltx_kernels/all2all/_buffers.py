"""The "cuda" backend: one IPC-shareable buffer per rank (csrc/all2all), the peers' buffers opened
through CUDA IPC (or handed over directly when one process hosts every rank), a host-mapped error
word the kernel writes when a peer does not arrive, and the launch. Protocol: docs/all2all.md."""
from __future__ import annotations

import math
import os

import torch

from .. import _ext
from .._dispatch import BackendUnavailable, log
from . import _ops
from ._common import MAX_WORLD, All2AllTimeout, disagreement, dist

_PHASES = {1: "entry handshake: it never became ready to receive", 2: "its data never arrived"}
_MISMATCH = 3  # the kernel's kPhaseMismatch


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
            # Peers named by GPU UUID: processes may see the GPUs under different indices
            # (CUDA_VISIBLE_DEVICES per rank). A peer GPU this process cannot see is left to the
            # IPC open, whose failure every rank learns of (_setup_cuda_ipc).
            me = self.device.index
            local = {u: k for k, u in enumerate(gpu_uuids()) if u}
            # (a torch that reports no UUID: the peer's own index, as every rank sees the same list then)
            peers = {local.get(i["uuid"]) if i.get("uuid") else int(i["device"].split(":")[1])
                     for i in infos} - {None, me}
            blocked = [d for d in sorted(peers) if not torch.cuda.can_device_access_peer(me, d)]
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
        self._host_err = mod.host_error_alloc(self.device.index)
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

    def _setup_cuda_ipc(self, may_fall_back: bool) -> str:
        """Allocate, exchange IPC handles, open the peers' buffers: "cuda", or (every rank alike,
        when one rank failed a step) "torch" where the choice was "auto", else BackendUnavailable.
        Each step's outcome is exchanged, so a rank that fails cannot leave the others waiting in
        a collective it never joins."""
        def attempt(step):
            try:
                return step(), None
            except Exception as e:  # CUDA errors surface as RuntimeError from the extension
                return None, f"{type(e).__name__}: {e}"

        def share():
            self._setup_cuda_common()
            return self._ext.ipc_handle(self._base, self.device.index)

        def open_peers():
            for r, (h, _) in enumerate(sent):
                if r != self.rank:
                    self._opened.append(self._ext.ipc_open(h, self.device.index))

        sent = self._exchange(attempt(share))
        failed = {r: e for r, (_, e) in enumerate(sent) if e}
        if not failed:
            # also the barrier before any launch: every rank has opened every peer
            failed = {r: e for r, (_, e) in enumerate(self._exchange(attempt(open_peers))) if e}
        if not failed:
            peers = iter(self._opened)
            self._bases = [self._base if r == self.rank else next(peers) for r in range(self.world_size)]
            return "cuda"
        release(self._ext, None, self._opened, None, self.device.index)
        self._exchange(None)  # every rank has closed its peers' buffers before any rank frees its own
        release(self._ext, self._base, [], self._host_err, self.device.index)
        self._ext = self._base = self._host_err = self._buf = None
        why = "; ".join(f"rank {r}: {e}" for r, e in sorted(failed.items()))
        if may_fall_back and not self.torch_reasons():
            log.warning("All2All: CUDA IPC setup failed (%s); using the torch backend", why)
            return "torch"
        raise BackendUnavailable(f"All2All: backend 'cuda' could not be set up: {why}")

    def _raise_if_failed(self):
        if self.broken is not None:
            raise self.broken
        code, peer, phase, epoch = self._ext.host_error_read(self._host_err)
        if code:
            if phase == _MISMATCH:
                what = f"{disagreement(peer)} (op #{epoch} of this instance)"
            else:
                what = (f"peer rank {peer} did not arrive within {self.timeout_seconds:g}s "
                        f"({_PHASES.get(phase, phase)}; op #{epoch} of this instance)")
            self.broken = All2AllTimeout(
                f"All2All rank {self.rank}: {what}. The kernel exited, the CUDA context is fine; destroy this "
                f"instance and build a new one." + ("" if phase == _MISMATCH else _local_hint(self)), int(peer))
            raise self.broken

    def _run_cuda(self, op, x, copy_out):
        self._raise_if_failed()
        start = self._buf.data_ptr()
        if start <= x.data_ptr() < start + self.capacity:
            # a view of this rank's buffer (a copy_out=False result): peers write it while it is read
            x = x.clone()
        shape = self.out_shape(op, x.shape)
        self._ext.launch(_ops.OPS[op], x, self._bases, self.capacity, self.rank, self.counts,
                         _ops.full_heads(op, x.shape, self.world_size), self.num_sms, self.timeout_seconds,
                         self._host_err, _ops.op_signature(op, x, self.counts))
        out = self._buf[: math.prod(shape) * x.element_size()].view(self.dtype).view(shape)
        return out.clone() if copy_out else out


def gpu_uuids() -> list:
    """The visible GPUs' UUIDs by local index ("" where torch does not report one)."""
    return [str(getattr(torch.cuda.get_device_properties(k), "uuid", "") or "")
            for k in range(torch.cuda.device_count())]


def release(ext, base, opened, host_err, device_index):
    """Close the opened peer buffers, free this rank's buffer and error word; each step on its own
    (teardown at interpreter exit has nothing left to report a failure to)."""
    if ext is None:
        return
    steps = [lambda: torch.cuda.synchronize(device_index)]
    steps += [lambda p=p: ext.ipc_close(p, device_index) for p in opened]
    if base is not None:
        steps.append(lambda: ext.free_block(base, device_index))
    if host_err is not None:
        steps.append(lambda: ext.host_error_free(host_err, device_index))
    for step in steps:
        try:
            step()
        except Exception:
            pass
    opened.clear()
