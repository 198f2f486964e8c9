"""The "torch" backend: the same ops through ``torch.distributed`` (``all_to_all_single`` /
``all_gather``: NCCL on GPUs, gloo on CPU), for multi-node groups, GPUs without peer access and
CPU. Always returns fresh tensors.

Ranks that disagree on the op, its shape or the token counts hand the collective sizes that do not
pair up. gloo then moves wrong bytes without an error when less arrives than a rank expects, and
aborts the process (a C++ terminate) when more does; so over gloo the ranks first exchange the op's
signature (``_ops.op_signature``, 8 bytes) and raise naming a peer before the data moves. Over
NCCL that would cost a host sync per op; there, as for any NCCL collective, the sizes must agree
(the ``cuda`` backend checks the signature in its kernel instead)."""
from __future__ import annotations

import datetime
import functools

import torch

from . import _ops
from ._common import All2AllTimeout, disagreement, dist


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
                if "timed out" in msg or "timeout" in msg:
                    why = f"did not complete within {self.timeout_seconds:g}s: a peer did not arrive"
                elif "connection" in msg:
                    why = "failed: a peer's connection closed (its process exited?)"
                else:
                    raise
                # the collective stays pending in the group, so the group's next one would pair with it
                self.broken = All2AllTimeout(
                    f"All2All rank {self.rank}: torch.distributed {what} {why} ({str(e)[:200]}). This process group "
                    f"is now out of step: build a new All2All on a new group (torch.distributed.new_group)")
                raise self.broken from e
        else:
            work.wait()

    def _run_torch(self, op, x, copy_out):
        w, r, counts = self.world_size, self.rank, self.counts
        offs, t = _prefix(counts)
        b, n, h, d = x.shape
        if w == 1:  # (detached: the ops record no autograd history, as with more ranks)
            return x.detach().clone()
        if self._over_gloo:
            self._agree(_ops.op_signature(op, x, counts))
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

    # ------------------------------------------------------------------ agreement over gloo
    @functools.cached_property
    def _over_gloo(self) -> bool:
        """Whether this rank's tensors travel over gloo (a group may name one backend per device
        type, e.g. "cpu:gloo,cuda:nccl")."""
        name = str(dist().get_backend(self.group)).lower()
        return "gloo" in name and (self.device.type == "cpu" or "nccl" not in name)

    def _agree(self, signature: int) -> None:
        """Every rank's signature of this op must be this rank's: else raise naming the lowest
        rank that differs (every rank sees all of them, so all raise)."""
        mine = torch.tensor([signature], dtype=torch.int64)
        theirs = [torch.empty_like(mine) for _ in range(self.world_size)]
        self._wait(dist().all_gather(theirs, mine, group=self.group, async_op=True), "all_gather")
        bad = [s for s, t in enumerate(theirs) if int(t) != signature]
        if bad:
            self.broken = All2AllTimeout(
                f"All2All rank {self.rank}: {disagreement(bad[0])}; destroy this instance and build a new one",
                bad[0])
            raise self.broken
