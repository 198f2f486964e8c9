"""How the ranks of an All2All agree on its "cuda" backend, on CPU: gloo processes with each rank
"on" its own GPU through a stand-in for the CUDA extension and torch's device queries. A rank
that cannot use CUDA IPC (no peer access from its GPU, an IPC handle it cannot open) must not
leave the others waiting in a collective it never joins: every rank takes the same backend
("torch" under "auto"), or every rank raises, and what was allocated or opened is released."""
import contextlib
import datetime
import os
import tempfile
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ltx_kernels as lk

UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]


class FakeExt:
    """The _C_all2all calls of the setup, recording what stays allocated or opened."""

    MAX_PEERS = 8

    def __init__(self, rank, fail_open=None, fail_alloc=None):
        self.rank, self.fail_open, self.fail_alloc = rank, fail_open, fail_alloc
        self.blocks, self.opened, self.host = set(), set(), set()

    def alloc_block(self, capacity, device):
        if self.rank == self.fail_alloc:
            raise RuntimeError("cudaMalloc(&ptr, bytes) failed: out of memory")
        self.blocks.add(1000 + self.rank)
        return 1000 + self.rank

    def host_error_alloc(self, device=None):
        self.host.add(7)
        return 7

    def buffer_view(self, base, nbytes, device):
        return torch.zeros(nbytes, dtype=torch.uint8)

    def ipc_handle(self, base, device):
        return f"handle-of-{base}".encode()

    def ipc_open(self, handle, device):
        if self.rank == self.fail_open:
            raise RuntimeError("cudaIpcOpenMemHandle failed: invalid device context")
        ptr = 5000 + int(handle.decode().rsplit("-", 1)[1])
        self.opened.add(ptr)
        return ptr

    def ipc_close(self, ptr, device):
        self.opened.remove(ptr)

    def free_block(self, ptr, device):
        self.blocks.remove(ptr)

    def host_error_free(self, ptr, device):
        self.host.remove(ptr)


def _worker(rank, world, path, scenario):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from ltx_kernels import _ext
    from ltx_kernels.all2all import _buffers

    ext = FakeExt(rank, fail_open=1 if scenario == "open_fails" else None,
                  fail_alloc=2 if scenario == "alloc_fails" else None)
    _ext.load = lambda name: (ext, None)
    device = f"cuda:{rank}"
    visible = UUIDS[:world]
    if scenario == "per_rank_visible":
        # each process lists the GPUs from its own (CUDA_VISIBLE_DEVICES per rank): its GPU is
        # cuda:0 everywhere, the peers' indices differ from process to process
        device, visible = "cuda:0", UUIDS[rank:world] + UUIDS[:rank]
    if scenario == "bad_device" and rank == 1:
        device = "cuda:7"
    if scenario == "unset_device":
        # no torch.cuda.set_device(local_rank): every rank defaults to the current device, cuda:0
        device, visible = None, UUIDS[:world]
        torch.cuda.is_available = lambda: True
        torch.cuda.current_device = lambda: 0
        torch.cuda.device_count = lambda: world
    _buffers.gpu_uuids = lambda: visible
    torch.cuda.is_available = lambda: True  # a CUDA machine, as this process sees it
    torch.cuda.device_count = lambda: len(visible)
    lk.all2all.gpu_uuids = _buffers.gpu_uuids
    torch.cuda.device = lambda d: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a: None
    asked = []

    def peer_access(a, b):
        asked.append(visible[b])
        if scenario == "no_peer_access":  # rank 1's GPU has no peer access (PCIe without P2P, say)
            return a != 1
        if scenario == "per_rank_visible":  # rank 1's GPU cannot reach rank 0's
            return not (rank == 1 and visible[b] == UUIDS[0])
        return True

    torch.cuda.can_device_access_peer = peer_access

    if scenario == "bad_device":
        with pytest.raises(ValueError, match=r"rank 1: cuda:7: only 3 CUDA device\(s\) are visible"):
            lk.All2All(rank, world, 16, 256, world, torch.bfloat16, device=device)
        dist.barrier()
        dist.destroy_process_group()
        os._exit(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a2a = lk.All2All(rank, world, 16, 256, world, torch.bfloat16, device=device)
    unset = [w for w in caught if "set_device" in str(w.message)]
    assert len(unset) == (scenario == "unset_device"), [str(w.message) for w in caught]
    if scenario == "unset_device":
        assert "all 3 ranks are on cuda:0 of 3 visible GPUs" in str(unset[0].message)
        assert a2a.backend == "cuda"  # ranks sharing a GPU work; the warning is about the likely mistake
        a2a.destroy()
    elif scenario == "per_rank_visible":
        # every peer was looked up by its GPU, not by the index it has in another process
        assert sorted(asked) == sorted(u for u in UUIDS[:world] if u != UUIDS[rank]), asked
        assert a2a.backend == "torch"
    elif scenario == "ok":
        assert a2a.backend == "cuda"
        assert a2a._bases == [1000 + r if r == rank else 5000 + 1000 + r for r in range(world)]
        assert ext.opened == {5000 + 1000 + r for r in range(world) if r != rank}
        a2a.destroy()
        assert not ext.opened and not ext.blocks and not ext.host
    else:
        assert a2a.backend == "torch", a2a.backend  # every rank, not only the one that failed
        assert not ext.opened and not ext.blocks and not ext.host  # nothing left behind
        assert getattr(a2a, "_buf", None) is None and a2a._ext is None
        with pytest.raises(lk.BackendUnavailable, match=f"rank {2 if scenario == 'alloc_fails' else 1}"):
            lk.All2All(rank, world, 16, 256, world, torch.bfloat16, device=f"cuda:{rank}", backend="cuda")
        assert not ext.opened and not ext.blocks and not ext.host
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's teardown (see tests/test_all2all.py)


@pytest.mark.parametrize("scenario", ["ok", "no_peer_access", "open_fails", "alloc_fails", "per_rank_visible",
                                      "bad_device", "unset_device"])
def test_every_rank_takes_the_same_backend(scenario):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(3, os.path.join(tmp, "rendezvous"), scenario), nprocs=3, join=True)
