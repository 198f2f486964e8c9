"""The "torch" backend: the same ops through ``torch.distributed`` (``all_to_all_single`` /
``all_gather``: NCCL on GPUs, gloo on CPU), for multi-node groups, GPUs without peer access and
CPU. Always returns fresh tensors.

Ranks that disagree on the op, its shape or the token counts would exchange wrong bytes without an
error, or (gloo, when more arrives than expected) abort the process. So every chunk a rank sends
ends in an 8-byte trailer, the op's signature (``_ops.op_signature``), which the receiver compares
with its own: on a GPU the verdict reaches the host without a sync per op and raises at the next op
or in ``check()``. On the CPU the ranks first exchange the signatures themselves (a small
all_gather) and raise before the data moves."""
from __future__ import annotations

import datetime

import torch

from . import _ops
from ._common import All2AllTimeout, dist

_SIG = 8  # bytes of the signature trailer


def _prefix(counts):
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out, acc


class TorchBackend:
    """Mixed into :class:`All2All`: the torch.distributed implementation of its ops."""

    def torch_reasons(self) -> list:
        if self.world_size == 1:
            return []
        d = dist()
        return [] if d.is_available() and d.is_initialized() else ["torch.distributed is not initialised"]

    def _wait(self, work, what):
        if work is None:
            return
        if self.device.type == "cpu":  # gloo honours a per-op timeout; NCCL would block the host for it
            try:
                # a zero timedelta is not a defined deadline for work.wait: the smallest positive one keeps 0's meaning
                work.wait(timeout=datetime.timedelta(seconds=min(max(self.timeout_seconds, 1e-3), 1e9)))
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
        self._raise_if_mismatched()
        elem = x.element_size()
        sig = self._signature(op, b, h * (w if op == "gather_heads" else 1), d, elem)
        if self.device.type == "cpu":
            theirs = [torch.empty_like(sig) for _ in range(w)]
            self._wait(dist().all_gather(theirs, sig, group=self.group, async_op=True), "all_gather")
            self._verify(torch.stack(theirs), sig)
        raw = lambda u: u.contiguous().view(torch.uint8).reshape(-1)  # noqa: E731  (gloo has no fp8)
        if op == "send_recv_heads":
            hpr = h // w
            tok = hpr * d * elem
            chunk = b * n * tok
            send = torch.empty(w, chunk + _SIG, dtype=torch.uint8, device=x.device)
            send[:, chunk:] = sig
            send[:, :chunk].view(self.dtype).view(w, b, n, hpr, d).copy_(x.view(b, n, w, hpr, d).permute(2, 0, 1, 3, 4))
            sizes = [b * c * tok + _SIG for c in counts]
            out = torch.empty(sum(sizes), dtype=torch.uint8, device=x.device)
            work = dist().all_to_all_single(out, send.view(-1), sizes, [chunk + _SIG] * w, group=self.group,
                                            async_op=True)
            self._wait(work, "all_to_all_single")
            parts = torch.split(out, sizes)
            self._verify(torch.stack([p[-_SIG:] for p in parts]), sig)
            return torch.cat([p[:-_SIG].view(self.dtype).view(b, c, hpr, d) for p, c in zip(parts, counts)], dim=1)
        if op == "gather_heads":
            hpr, c_r = h, counts[r]
            tok = hpr * d * elem
            send = torch.cat([piece for s in range(w) for piece in (raw(x[:, offs[s]:offs[s] + counts[s]]), sig)])
            chunk = b * c_r * tok
            out = torch.empty(w, chunk + _SIG, dtype=torch.uint8, device=x.device)
            work = dist().all_to_all_single(out.view(-1), send, [chunk + _SIG] * w,
                                            [b * c * tok + _SIG for c in counts], group=self.group, async_op=True)
            self._wait(work, "all_to_all_single")
            self._verify(out[:, chunk:], sig)
            blocks = out[:, :chunk].view(self.dtype).view(w, b, c_r, hpr, d)
            return blocks.permute(1, 2, 0, 3, 4).reshape(b, c_r, w * hpr, d)
        cmax = max(counts)
        per = b * cmax * h * d * elem
        pad = torch.zeros(per + _SIG, dtype=torch.uint8, device=x.device)
        pad[:per].view(self.dtype).view(b, cmax, h, d)[:, :n] = x
        pad[per:] = sig
        gathered = [torch.empty(per + _SIG, dtype=torch.uint8, device=x.device) for _ in range(w)]
        work = dist().all_gather(gathered, pad, group=self.group, async_op=True)
        self._wait(work, "all_gather")
        self._verify(torch.stack([g[per:] for g in gathered]), sig)
        return torch.cat([g[:per].view(self.dtype).view(b, cmax, h, d)[:, :c] for g, c in zip(gathered, counts)], dim=1)

    # ------------------------------------------------------------------ the signature trailers
    def _signature(self, op, b, heads, d, elem) -> torch.Tensor:
        """The op's signature as 8 bytes on this rank's device (kept per signature: they repeat)."""
        value = _ops.op_signature(op, b, heads, d, elem, self.counts)
        cache = self.__dict__.setdefault("_signatures", {})
        sig = cache.get(value)
        if sig is None:
            if len(cache) > 256:
                cache.clear()
            # (a fill on the device, not a copy from the host: a CUDA-graph capture may be under way)
            sig = cache[value] = torch.full((1,), value, dtype=torch.int64, device=self.device).view(torch.uint8)
        return sig

    def _verify(self, trailers: torch.Tensor, sig: torch.Tensor) -> None:
        """trailers [W, 8]: what each rank appended to its chunk for this one."""
        w = len(trailers)
        if getattr(self, "_ranks_desc", None) is None or len(self._ranks_desc) != w:
            self._ranks_desc = torch.arange(w, 0, -1, device=trailers.device)  # rank s -> w - s
        # w - (the lowest rank whose trailer differs), 0 when none does: few small kernels, no sync
        code = ((trailers != sig).any(dim=1) * self._ranks_desc).amax()
        if self.device.type == "cpu":
            if int(code):
                self._mismatch(w - int(code))
            return
        # on a GPU: into a device flag, copied to pinned host memory without waiting; read at the
        # next op and in check()
        if getattr(self, "_sig_flag", None) is None:
            self._sig_flag = torch.zeros((), dtype=torch.int64, device=self.device)
            self._sig_host = torch.zeros((), dtype=torch.int64).pin_memory()
        torch.maximum(self._sig_flag, code, out=self._sig_flag)
        self._sig_host.copy_(self._sig_flag, non_blocking=True)

    def _raise_if_mismatched(self) -> None:
        host = getattr(self, "_sig_host", None)
        if host is not None and int(host):
            self._mismatch(len(self._ranks_desc) - int(host))

    def _mismatch(self, peer: int):
        self.broken = All2AllTimeout(
            f"All2All rank {self.rank}: peer rank {peer} ran another op, shape or token counts (set_rank_tokens): "
            f"every rank must issue the same ops with the same counts; destroy this instance and build a new one",
            peer)
        raise self.broken
