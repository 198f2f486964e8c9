"""tools/gemm_protocols.py's timing loop without a GPU: torch.cuda's events, sleep and synchronize
replaced by fakes that log the order in which the loop enqueues its work."""
import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # gemm_protocols imports nvml_clock from there
spec = importlib.util.spec_from_file_location("gemm_protocols", ROOT / "tools/gemm_protocols.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


@pytest.fixture
def queue(monkeypatch):
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.index = None

        def record(self):
            self.index = len(log)
            log.append("event")

        def elapsed_time(self, end):  # ms: the number of entries enqueued between the two events
            return float(end.index - self.index)

        def query(self):  # the GPU has passed this event
            log.append("query")
            return True

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(f"sleep {cycles}"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("synchronize"))
    return log


def test_sustained_calls_queue_behind_the_sleep(queue):
    ms = tool.timed_median_ms(lambda: queue.append("call"), 5, flush=False, head_start=True)
    assert queue[0] == f"sleep {tool.HEAD_START_CYCLES}"  # before the first event: the host gets ahead
    assert queue[1:] == ["event", "call", "event"] * 5 + ["synchronize"]
    assert ms == 2.0


def test_the_clock_window_restarts_once_the_gpu_reaches_the_calls(queue):
    tool.timed_median_ms(lambda: queue.append("call"), 3, flush=False, head_start=True,
                         on_gpu_start=lambda: queue.append("restart"))
    assert queue[-3:] == ["query", "restart", "synchronize"]  # all calls queued first, then the wait


def test_burst_flushes_before_each_call_and_does_not_sleep(queue, monkeypatch):
    monkeypatch.setattr(tool, "_FLUSH", torch.empty(16, dtype=torch.uint8))
    tool.timed_median_ms(lambda: queue.append("call"), 3, flush=True)
    assert not any(e.startswith("sleep") for e in queue)
    assert queue == ["event", "call", "event"] * 3 + ["synchronize"]


def test_deep_gemm_is_timed_only_at_the_weights_it_takes():
    assert tool.deep_gemm_accepts(4096, 2048) and tool.deep_gemm_accepts(16384, 4096)
    assert not tool.deep_gemm_accepts(6144, 4096) and not tool.deep_gemm_accepts(2176, 7168)


def test_interleaved_calls_alternate_behind_one_sleep(queue):
    fns = {"a": lambda: queue.append("a"), "b": lambda: queue.append("b")}
    ms = tool.timed_interleaved_ms(fns, 3, on_gpu_start=lambda: queue.append("restart"))
    assert queue[0] == f"sleep {tool.HEAD_START_CYCLES}"
    assert queue[1:-3] == ["event", "a", "event", "event", "b", "event"] * 3
    assert queue[-3:] == ["query", "restart", "synchronize"]
    assert ms == {"a": 2.0, "b": 2.0}


def test_interleaved_sleep_grows_with_the_calls_queued(queue):
    tool.timed_interleaved_ms({n: (lambda: None) for n in "abcde"}, 30)
    assert queue[0] == f"sleep {tool.HEAD_START_CYCLES * 3}"  # 150 calls: three times 50


def test_interleaved_probes_time_a_sleep_after_every_call(queue):
    fns = {"a": lambda: queue.append("a"), "b": lambda: queue.append("b")}
    probes = {}
    ms = tool.timed_interleaved_ms(fns, 3, probes=probes)
    probe = f"sleep {tool.PROBE_CYCLES}"
    assert queue[1:-1] == ["event", "a", "event", probe, "event", "event", "b", "event", probe, "event"] * 3
    assert ms == {"a": 2.0, "b": 2.0}  # the probe stays outside the call's events
    # the fake's ms is the entries between the events: the sleep and the probe's own record, 2
    assert probes == {"a": pytest.approx(tool.PROBE_CYCLES / 2.0 / 1e3), "b": pytest.approx(tool.PROBE_CYCLES / 2.0 / 1e3)}


def test_probed_rounds_time_five_calls_then_the_sleep(queue, monkeypatch):
    monkeypatch.setattr(tool, "_load", lambda fns, ms, calls: queue.append("load"))
    monkeypatch.setattr(tool, "PROBED_ROUNDS", 2)

    class Sampler:
        def window(self, fn):
            return fn(), 1500.0, 700.0

        def restart(self):
            queue.append("restart")

    probes = {}
    ms, nvml_mhz, watts = tool.measure(lambda: queue.append("call"), "probed", 600.0, Sampler(), probes)
    mhz = probes["fn"]
    start = queue.index("load") + 2  # the load, then the head start's sleep
    assert queue[start - 1] == f"sleep {tool.HEAD_START_CYCLES}"
    one_round = ["event"] + ["call"] * 5 + ["event", f"sleep {tool.PROBE_CYCLES}", "event"]
    assert queue[start:start + 2 * len(one_round)] == one_round * 2
    assert ms == pytest.approx(6.0 / 5)  # five calls and the end event between the two events
    assert mhz == pytest.approx(tool.PROBE_CYCLES / 2.0 / 1e3) and (nvml_mhz, watts) == (1500.0, 700.0)


def test_shuffled_rounds_vary_the_order_and_split_the_medians_by_predecessor(queue):
    last = [None]

    def tracked(n):
        def call():
            if n == "b" and last[0] == "a":  # b runs slower right after a
                queue.extend(["pad", "pad"])
            queue.append(n)
            last[0] = n
        return call

    calls = {n: tracked(n) for n in "abc"}
    after = {}
    ms = tool.timed_interleaved_ms(calls, 60, after=after)
    order = [e for e in queue if e in ("a", "b", "c")]
    rounds = [tuple(order[i:i + 3]) for i in range(0, len(order), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds) and len(set(rounds)) > 1  # each round all three, orders vary
    assert after["b"]["a"] == 4.0 and after["b"]["c"] == 2.0  # the slow neighbour shows in b's split
    assert set(after["a"]) <= {"start", "a", "b", "c"} and ms["a"] == 2.0
    tool.timed_interleaved_ms(calls, 60, after={})
    assert [e for e in queue if e in ("a", "b", "c")][len(order):] == order  # seeded: the same orders again
