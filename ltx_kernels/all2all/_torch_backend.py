"""The "torch" backend: the same ops through ``torch.distributed`` (``all_to_all_single`` /
``all_gather``: NCCL on GPUs, gloo on CPU), for multi-node groups, GPUs without peer access and
CPU. Always returns fresh tensors."""
from __future__ import annotations

import datetime

import torch

from ._common import All2AllTimeout, dist


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
        raw = lambda u: u.contiguous().view(torch.uint8).reshape(-1)  # noqa: E731  (gloo has no fp8)
        per_tok = h * d * x.element_size()
        if op == "send_recv_heads":
            hpr = h // w
            inp = x.view(b, n, w, hpr, d).permute(2, 0, 1, 3, 4)
            out = torch.empty(b * t * hpr * d * x.element_size(), dtype=torch.uint8, device=x.device)
            tok = hpr * d * x.element_size()
            work = dist().all_to_all_single(out, raw(inp), [b * c * tok for c in counts], [b * n * tok] * w,
                                            group=self.group, async_op=True)
            self._wait(work, "all_to_all_single")
            parts = torch.split(out, [b * c * tok for c in counts])
            return torch.cat([p.view(self.dtype).view(b, c, hpr, d) for p, c in zip(parts, counts)], dim=1)
        if op == "gather_heads":
            hpr, c_r = h, counts[r]
            tok = hpr * d * x.element_size()
            inp = torch.cat([raw(x[:, offs[s]:offs[s] + counts[s]]) for s in range(w)])
            out = torch.empty(w * b * c_r * tok, dtype=torch.uint8, device=x.device)
            work = dist().all_to_all_single(out, inp, [b * c_r * tok] * w, [b * c * tok for c in counts],
                                            group=self.group, async_op=True)
            self._wait(work, "all_to_all_single")
            blocks = out.view(self.dtype).view(w, b, c_r, hpr, d)
            return blocks.permute(1, 2, 0, 3, 4).reshape(b, c_r, w * hpr, d)
        cmax = max(counts)
        pad = torch.zeros(b, cmax, h, d, dtype=x.dtype, device=x.device)
        pad[:, :n] = x
        gathered = [torch.empty(b * cmax * per_tok, dtype=torch.uint8, device=x.device) for _ in range(w)]
        work = dist().all_gather(gathered, raw(pad), group=self.group, async_op=True)
        self._wait(work, "all_gather")
        return torch.cat([g.view(self.dtype).view(b, cmax, h, d)[:, :c] for g, c in zip(gathered, counts)], dim=1)
