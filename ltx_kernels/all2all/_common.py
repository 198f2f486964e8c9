"""What the parts of the All2All package share: its error type, its limits, torch.distributed."""
from __future__ import annotations

import torch

DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float16, torch.float32)
MAX_WORLD = 8
DEFAULT_TIMEOUT_S = 10.0


class All2AllTimeout(TimeoutError):
    """A peer did not arrive in time. ``peer`` is its rank (None when unknown)."""

    def __init__(self, msg: str, peer: int | None = None):
        super().__init__(msg)
        self.peer = peer


def disagreement(peer: int) -> str:
    """Why an op failed when a peer's op, shape or token counts differ from this rank's (both
    backends raise All2AllTimeout with it)."""
    return (f"peer rank {peer} ran another op, shape or token counts (set_rank_tokens): every rank must "
            f"issue the same ops with the same counts")


def dist():
    import torch.distributed as dist

    return dist
