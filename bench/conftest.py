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

    def measure(self, fn, *, nbytes: float = 0.0, flops: float = 0.0, anchors: dict | None = None,
                graph_anchors: bool = False, **meta):
        """graph_anchors: time the anchors as CUDA-graph replays too (anchor_<name>_graph_*), for
        shapes small enough that an eager call's host work could hide the kernel."""
        self.info.update(meta)
        self.info["device"] = torch.cuda.get_device_name()
        ms = gpu_ms(fn)
        self.info["ms"] = ms
        if nbytes:
            self.info["gbps"] = nbytes / ms / 1e6
        if flops:
            self.info["tflops"] = flops / ms / 1e9
        for name, afn in (anchors or {}).items():
            try:
                ams = gpu_ms(afn)
            except Exception as e:  # an anchor that does not run here is reported, not fatal
                self.info[f"anchor_{name}_error"] = f"{type(e).__name__}: {e}"[:200]
                continue
            self.info[f"anchor_{name}_ms"] = ams
            if nbytes:
                self.info[f"anchor_{name}_gbps"] = nbytes / ams / 1e6
            if flops:
                self.info[f"anchor_{name}_tflops"] = flops / ams / 1e9
            self.info[f"speedup_vs_{name}"] = ams / ms
            if graph_anchors:
                try:
                    gms = _graph_ms(afn)
                except Exception as e:
                    self.info[f"anchor_{name}_graph_error"] = f"{type(e).__name__}: {e}"[:200]
                    continue
                self.info[f"anchor_{name}_graph_ms"] = gms
                if nbytes:
                    self.info[f"anchor_{name}_graph_gbps"] = nbytes / gms / 1e6
                if flops:
                    self.info[f"anchor_{name}_graph_tflops"] = flops / gms / 1e9

        # The same call replayed from a CUDA graph: the kernels alone, without Python launch cost.
        try:
            gms = _graph_ms(fn)
            self.info["graph_ms"] = gms
            if nbytes:
                self.info["graph_gbps"] = nbytes / gms / 1e6
            if flops:
                self.info["graph_tflops"] = flops / gms / 1e9
        except Exception as e:
            self.info["graph_error"] = f"{type(e).__name__}: {e}"[:200]

        def synced():
            fn()
            torch.cuda.synchronize()

        self.benchmark.pedantic(synced, rounds=int(os.environ.get("LTX_BENCH_ROUNDS", "20")), warmup_rounds=3)


@pytest.fixture
def rec(benchmark):
    return Recorder(benchmark)
