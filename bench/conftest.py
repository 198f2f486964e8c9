"""Benchmark helpers: CUDA-event medians, GB/s and TFLOP/s beside the anchors of the same run.

Each benchmark stores in pytest-benchmark's ``extra_info``:
  ms, gbps / tflops       our kernel (median of do_bench, CUDA events)
  anchor_<name>_ms, ...   each anchor measured in the same process right after
pytest-benchmark's own timing calls the op with a device synchronize, so its
regression compare (--benchmark-compare-fail=median:10%) is meaningful too.
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    collect_ignore_glob = ["test_*.py"]


def gpu_ms(fn, rep_ms: int = 200) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=50, rep=rep_ms, return_mode="median"))


def _graph_ms(fn) -> float:
    """fn captured once in a CUDA graph, its replays timed: the kernels without host cost."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return gpu_ms(g.replay)


class Recorder:
    def __init__(self, benchmark):
        self.benchmark = benchmark
        self.info = benchmark.extra_info

    def _time(self, prefix, timer, fn, nbytes, flops):
        """timer(fn) stored as <prefix>ms and <prefix>gbps / tflops; errors other than for our own
        call (prefix "") are stored as <prefix>error and give None."""
        try:
            ms = timer(fn)
        except Exception as e:
            if not prefix:
                raise
            self.info[f"{prefix}error"] = f"{type(e).__name__}: {e}"[:200]
            return None
        self.info[f"{prefix}ms"] = ms
        if nbytes:
            self.info[f"{prefix}gbps"] = nbytes / ms / 1e6
        if flops:
            self.info[f"{prefix}tflops"] = flops / ms / 1e9
        return ms

    def measure(self, fn, *, nbytes: float = 0.0, flops: float = 0.0, anchors: dict | None = None,
                graph_anchors: bool = False, **meta):
        """graph_anchors: time the anchors as CUDA-graph replays too (anchor_<name>_graph_*), for
        shapes small enough that an eager call's host work could hide the kernel."""
        self.info.update(meta)
        self.info["device"] = torch.cuda.get_device_name()
        ms = self._time("", gpu_ms, fn, nbytes, flops)
        for name, afn in (anchors or {}).items():
            # an anchor that does not run here is reported, not fatal
            ams = self._time(f"anchor_{name}_", gpu_ms, afn, nbytes, flops)
            if ams is None:
                continue
            self.info[f"speedup_vs_{name}"] = ams / ms
            if graph_anchors:
                self._time(f"anchor_{name}_graph_", _graph_ms, afn, nbytes, flops)
        # The same call replayed from a CUDA graph: the kernels alone, without Python launch cost.
        self._time("graph_", _graph_ms, fn, nbytes, flops)

        def synced():
            fn()
            torch.cuda.synchronize()

        self.benchmark.pedantic(synced, rounds=int(os.environ.get("LTX_BENCH_ROUNDS", "20")), warmup_rounds=3)


@pytest.fixture
def rec(benchmark):
    return Recorder(benchmark)
