import logging
import os
import re
import subprocess
import sys

import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch, norm_rope


def _args():
    x = torch.randn(1, 2, 128, dtype=torch.bfloat16)
    c = torch.randn(1, 2, 2, 32, dtype=torch.bfloat16).swapaxes(1, 2)
    return x, c, c


def test_each_backend_says_why_not():
    x, c, s = _args()
    reasons = norm_rope.split_op.why_not(x, c, s, None, False, 1e-6)
    assert reasons["torch"] == []
    assert reasons["cuda"] == ["not implemented for this op"]


def test_unsupported_backend_lists_reasons():
    x, c, s = _args()
    with pytest.raises(lk.BackendUnavailable, match="'cuda'.*not implemented"):
        lk.rms_norm_split_rope(x, c, s, backend="cuda")


def test_cpu_triton_needs_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, c, s = _args()
    assert "CPU tensors need TRITON_INTERPRET=1" in norm_rope.split_op.why_not(x, c, s, None, False, 1e-6)["triton"]
    with pytest.raises(lk.BackendUnavailable, match="TRITON_INTERPRET"):
        lk.rms_norm_split_rope(x, c, s, backend="triton")
    # auto falls back to torch
    assert lk.rms_norm_split_rope(x, c, s).dtype == torch.bfloat16


def test_env_default_backend(monkeypatch, caplog):
    monkeypatch.setenv("LTX_KERNELS_BACKEND", "torch")
    x, c, s = _args()
    _dispatch.log.setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="ltx_kernels"):
        norm_rope.split_op.select("auto", x, c, s, None, False, 1e-6)
    assert "rms_norm_split_rope: torch (requested)" in caplog.text
    monkeypatch.setenv("LTX_KERNELS_BACKEND", "nope")
    with pytest.raises(ValueError, match="LTX_KERNELS_BACKEND must be one of .*got 'nope'"):
        lk.rms_norm_split_rope(x, c, s)


def test_backend_variable_is_read_on_every_call(monkeypatch):
    # the fast read goes through os.environ's own dict: every way of changing the variable shows
    from unittest import mock

    monkeypatch.delenv("LTX_KERNELS_BACKEND", raising=False)
    assert _dispatch.resolve_backend_name("auto") == "auto"
    monkeypatch.setenv("LTX_KERNELS_BACKEND", "triton")
    assert _dispatch.resolve_backend_name(None) == "triton"
    monkeypatch.setenv("LTX_KERNELS_BACKEND", "")
    assert _dispatch.resolve_backend_name("auto") == "auto"
    with mock.patch.dict(os.environ, {"LTX_KERNELS_BACKEND": "torch"}):
        assert _dispatch.resolve_backend_name("auto") == "torch"
    with mock.patch.object(os, "environ", {"LTX_KERNELS_BACKEND": "cuda"}):
        assert _dispatch.resolve_backend_name("auto") == "cuda"
    assert _dispatch.resolve_backend_name("auto") == "auto"
    assert _dispatch.resolve_backend_name("torch") == "torch"  # an explicit backend wins


@pytest.mark.parametrize("text", ["abc", "256,128", "100,100,1", "256,128,2,0", "256,128,2,1,1"])
def test_bad_sm90_tile_variable_names_itself(monkeypatch, text):
    """LTX_KERNELS_SM90_TILE (benchmarks) is read at the first SM90 GEMM; a value that is not a
    tile config says so instead of an int() error at import or a launch of an unknown config."""
    from ltx_kernels import gemm

    monkeypatch.setenv("LTX_KERNELS_SM90_TILE", text)
    gemm._forced.cache_clear()
    try:
        with pytest.raises(ValueError, match="LTX_KERNELS_SM90_TILE=.*expected BM,BN,CLUSTER"):
            gemm.sm90_tile_config(4096, 4096, 132, 4096)
    finally:
        gemm._forced.cache_clear()


def test_sm90_tile_variable_forces_the_config(monkeypatch):
    from ltx_kernels import gemm

    gemm._forced.cache_clear()
    try:
        monkeypatch.setenv("LTX_KERNELS_SM90_TILE", " 128,128,2 ")
        assert gemm.sm90_tile_config(4096, 4096, 132, 4096) == (128, 128, 2)
        gemm._forced.cache_clear()
        monkeypatch.setenv("LTX_KERNELS_SM90_TILE", "128,128,1,4")
        assert gemm.sm90_split_k(256, 4096, 4096, (128, 128, 1), 132) == 4
        gemm._forced.cache_clear()
        monkeypatch.delenv("LTX_KERNELS_SM90_TILE")
        assert gemm.sm90_tile_config(32768, 4096, 132, 4096) in gemm.SM90_TILES
    finally:
        gemm._forced.cache_clear()


def test_auto_logs_what_it_skipped(monkeypatch, caplog):
    monkeypatch.delenv("LTX_KERNELS_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, c, s = _args()
    _dispatch.log.setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="ltx_kernels"):
        norm_rope.split_op.select("auto", x, c, s, None, False, 1e-6)
    assert "rms_norm_split_rope: torch (skipped" in caplog.text and "TRITON_INTERPRET" in caplog.text


def test_main_job_lists_every_op():
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-m", "ltx_kernels", "--no-bench"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    from ltx_kernels import _cases

    for case in _cases.CASES:  # every public op, both linear layers, All2All
        assert f"\n  {case.name} " in out.stdout
    assert "FAILED" not in out.stdout
    tail = out.stdout.strip().splitlines()[-2:]
    assert re.match(r"\d+ checked, \d+ skipped", tail[0]), tail
    if not torch.cuda.is_available():
        # The cuda backends cannot run here: no claim that everything passed, no interpreter timings.
        assert "all checks passed" not in out.stdout
        assert "fp8_gemm_nt cuda: needs CUDA tensors" in tail[0]
        assert "GB/s" not in out.stdout and "nan" not in out.stdout


def test_config_cache_round_trip(tmp_path, monkeypatch):
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    tuning._memory.clear()
    assert tuning.lookup("k", (1, 2)) is None
    assert tuning.choose("k", (1, 2), {"BLOCK": 4}) == {"BLOCK": 4}
    tuning.store("k", (1, 2), {"BLOCK": 8}, 0.5)
    tuning._memory.clear()
    assert tuning.lookup("k", (1, 2)) == {"BLOCK": 8}
    assert list(tmp_path.glob("*.json"))
    tuning._memory.clear()


def test_store_before_any_lookup_keeps_the_shipped_configs(tmp_path, monkeypatch):
    """A record stored first (warmup, autotune) joins the configs already known, shipped ones
    included, instead of standing alone in the process's table."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "cpu.json").write_text('{"device": "cpu", "configs": {"k|9": {"config": {"BLOCK": 2}, "ms": 1}}}')
    monkeypatch.setattr(tuning, "_SHIPPED", shipped)
    tuning._memory.clear()
    tuning.store("k", (1,), {"BLOCK": 8}, 0.5, "cpu")
    assert tuning.lookup("k", (9,), "cpu") == {"BLOCK": 2} and tuning.lookup("k", (1,), "cpu") == {"BLOCK": 8}
    tuning._memory.clear()


def test_unwritable_config_cache_warns_and_keeps_the_record(tmp_path, monkeypatch, caplog):
    """A read-only or full cache must not fail the op that tuned: the record stays in memory, one
    warning names the file."""
    from ltx_kernels import tuning

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(blocker / "cache"))  # mkdir fails under a file
    tuning._memory.clear()
    with caplog.at_level(logging.WARNING, logger="ltx_kernels"):
        tuning.store("k", (1, 2), {"BLOCK": 8}, 0.5, "cpu")
        tuning.store("k", (3, 4), {"BLOCK": 16}, 0.5, "cpu")
    assert tuning.lookup("k", (1, 2), "cpu") == {"BLOCK": 8} and tuning.lookup("k", (3, 4), "cpu") == {"BLOCK": 16}
    assert caplog.text.count("cannot write the kernel config cache") == 1 and "a_file" in caplog.text
    tuning._memory.clear()


def test_autotune_without_a_gpu_uses_the_heuristic(tmp_path, monkeypatch):
    """LTX_KERNELS_AUTOTUNE=1 where nothing can be timed (CPU tensors, the interpreter) runs the
    op with its heuristic config; where no candidate runs, the heuristic too, with a warning."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LTX_KERNELS_AUTOTUNE", "1")
    tuning._memory.clear()
    tuning._choices.clear()
    ran = []
    run = lambda cfg: ran.append(cfg)  # noqa: E731
    assert tuning.choose("k", ("cpu",), {"BLOCK": 4}, lambda: [{"BLOCK": 8}], run, device="cpu") == {"BLOCK": 4}
    assert not ran  # nothing was timed on the CPU
    monkeypatch.setattr(tuning, "can_time", lambda device: True)

    def failing(cfg):
        raise RuntimeError("out of resources")
    assert tuning.choose("k", ("gpu",), {"BLOCK": 4}, lambda: [{"BLOCK": 8}], failing, device="cuda") == {"BLOCK": 4}
    tuning._memory.clear()
    tuning._choices.clear()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="Triton runs CPU tensors only under its interpreter")
def test_autotune_env_on_cpu_runs_the_op(monkeypatch):
    """The public op under LTX_KERNELS_AUTOTUNE=1 on CPU tensors (it used to try to time candidates
    and fail with 'no config ran')."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_AUTOTUNE", "1")
    tuning._choices.clear()
    x = torch.randn(3, 256)
    q, s = lk.quantize_blockwise(x, backend="triton")
    qr, sr = lk.quantize_blockwise(x, backend="torch")
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and torch.equal(s, sr)
    tuning._choices.clear()


def test_backend_memo_keys_on_alignment():
    """The per-signature backend memo must not reuse a choice made for differently aligned data."""
    from ltx_kernels._dispatch import Op, signature

    op = Op("probe")
    op.register("torch")(lambda x: "torch")
    op.register("triton", reasons=lambda x: [] if x.data_ptr() % 16 == 0 else ["misaligned"])(lambda x: "triton")
    base = torch.zeros(64, dtype=torch.uint8)
    aligned = base[:16] if base.data_ptr() % 16 == 0 else base[16 - base.data_ptr() % 16:][:16]
    shifted = base[aligned.storage_offset() + 1:][:16]
    assert signature((aligned,)) != signature((shifted,))
    assert op("auto", aligned) == "triton"
    assert op("auto", shifted) == "torch"


def test_signature_describes_tensor_subclasses_and_keeps_plain_values():
    """A Parameter is keyed by what it holds (as a plain tensor of that layout), not by its object;
    None, numbers and strings are kept as they are."""
    from ltx_kernels._dispatch import signature

    plain = torch.randn(8, 16)
    param = torch.nn.Parameter(plain.clone())
    other = torch.nn.Parameter(torch.randn(16, 8).t())
    assert signature((param,))[0][:4] == signature((plain,))[0][:4]
    assert signature((param,)) != signature((other,))
    assert signature((None, 1, 2.5, True, "split")) == (None, 1, 2.5, True, "split")


def test_preference_reorders_auto_only(caplog):
    """Op.preference may put another backend first for some inputs (the GEMM's measured choice);
    auto follows it, an explicit backend does not, and the log says why."""
    op = _dispatch.Op("toy")
    op.register("torch")(lambda x: "torch")
    op.register("triton")(lambda x: "triton")
    assert op("auto", torch.zeros(1)) == "triton"  # the priority order
    op.backends["triton"].reasons = lambda x: ["not today"]
    assert op("auto", torch.zeros(2)) == "torch"
    op.backends["triton"].reasons = lambda x: []
    op.preference = lambda x: (("torch", "triton"), "measured") if x.numel() == 3 else (("triton", "torch"), None)
    _dispatch.log.setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="ltx_kernels"):
        assert op("auto", torch.zeros(3)) == "torch"
    assert "order torch, triton: measured" in caplog.text
    assert op("auto", torch.zeros(4)) == "triton"
    assert op("torch", torch.zeros(4)) == "torch"


def test_new_tuning_record_resets_memoised_choices(tmp_path, monkeypatch):
    """Choices are memoised per signature; tuning.store (a preference may read its records)
    makes every op choose again."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    op = _dispatch.Op("toy2")
    op.register("torch")(lambda x: "torch")
    op.register("triton")(lambda x: "triton")
    first = {"name": "torch"}
    op.preference = lambda x: ((first["name"], "triton", "torch"), "test")
    assert op("auto", torch.zeros(1)) == "torch"
    first["name"] = "triton"
    assert op("auto", torch.zeros(1)) == "torch"  # memoised
    tuning.store("toy2", ("k",), {"x": 1}, 0.1, "cpu")
    assert op("auto", torch.zeros(1)) == "triton"


def test_registered_op_takes_the_plan_of_its_signature(monkeypatch):
    """What torch.library runs for an op (compiled graphs, torch.ops calls): a call of a new
    signature goes through the backend and records the plan it offers; the next call of that
    signature runs the plan (the backend is not called again), a call of another signature does not."""
    from ltx_kernels import fp6

    calls = []

    def backend_impl(p, n, backend):
        calls.append(tuple(p.shape))
        out = fp6.ref.fp6_unpack(p, n)
        fp6._plans.offer(lambda p, n: fp6.ref.fp6_unpack(p, n) + 0)
        return out

    monkeypatch.setattr(fp6, "_plans", _dispatch.Plans())
    monkeypatch.setattr(fp6, "_fp6_unpack_op_impl", backend_impl)
    codes = torch.randint(0, 256, (3, 8), dtype=torch.uint8) & 0x9F
    p = fp6.ref.fp6_pack(codes)
    for _ in range(3):
        assert torch.equal(torch.ops.ltx_kernels.fp6_unpack(p, 8, "torch"), codes)
    assert calls == [(3, 6)], "the second and third calls should have run the recorded plan"
    p2 = fp6.ref.fp6_pack(codes[:2])
    assert torch.equal(torch.ops.ltx_kernels.fp6_unpack(p2, 8, "torch"), codes[:2])
    assert calls == [(3, 6), (2, 6)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans are offered by the CUDA launchers")
def test_compiled_graph_runs_planned_ops():
    """A compiled fp6 unpack + dequantize chain: after the first call records the plans, later calls
    (fresh inputs of the same signature) take them and still match the reference."""
    from ltx_kernels import fp6, quantize, reference as ref

    def chain(p, s):
        q = lk.fp6_unpack(p, 256).view(torch.float8_e4m3fn)
        return lk.dequantize_blockwise(q, s)

    compiled = torch.compile(chain, fullgraph=True)
    for _ in range(3):
        codes = torch.randint(0, 256, (64, 256), dtype=torch.uint8, device="cuda") & 0x9F
        p = ref.fp6_pack(codes)
        s = torch.rand(64, 2, device="cuda") + 0.5
        want = ref.dequantize_blockwise(codes.view(torch.float8_e4m3fn), s)
        torch.testing.assert_close(compiled(p, s), want, rtol=0, atol=0)
    gen = fp6.tuning.generation
    assert fp6._plans.get(_dispatch.signature(("fp6_unpack", p, 256, "auto", gen)))
    assert quantize._plans.get(_dispatch.signature(("dequantize", codes.view(torch.float8_e4m3fn), s, torch.bfloat16,
                                                    "auto", gen)))


def test_direct_launcher_refuses_a_tensor_among_the_fixed_arguments():
    """A plan's launcher passes the first call's fixed arguments to every later launch: a tensor
    there would silently stand in for later calls' tensors."""
    from ltx_kernels.triton import direct_launcher

    x, y = torch.zeros(4), torch.zeros(4)
    assert direct_launcher(None, (1,), (x, y, 4, 1), 2) is None
    with pytest.raises(ValueError, match=r"arguments \[2\] are tensors but n_dynamic=2"):
        direct_launcher(None, (1,), (x, y, torch.zeros(1), 4), 2)


class _OnCuda1(torch.Tensor):
    """A CPU tensor that says it lives on cuda:1 (what the device-guard logic reads)."""

    @property
    def device(self):
        return torch.device("cuda", 1)


class _Devices:
    """Stand-ins for torch's current-device calls: device 0 current, ``torch.cuda.device(i)``
    switches it for its block; ``seen`` records the current device at each call of a kernel."""

    def __init__(self, monkeypatch):
        self.current, self.seen = 0, []
        devices = self

        class Switch:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                self.prev, devices.current = devices.current, self.index

            def __exit__(self, *exc):
                devices.current = self.prev

        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "device", Switch)
        monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: self.current, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 1000 + index, raising=False)

    def kernel(self, *args):
        self.seen.append(self.current)


def test_op_runs_a_call_on_another_device_with_that_device_current(monkeypatch):
    """Triton compiles, tunes and launches on the current device: a call on tensors of cuda:1 while
    cuda:0 is current must switch (the CUDA extensions' own guards do the same), and switch back."""
    devs = _Devices(monkeypatch)
    op = _dispatch.Op("device_guard_probe")
    _dispatch._ops.remove(op)
    op.register("torch")(devs.kernel)
    op("torch", 3, torch.Tensor._make_subclass(_OnCuda1, torch.zeros(4)))
    op("torch", torch.zeros(4))
    assert devs.seen == [1, 0] and devs.current == 0


def test_direct_launcher_launches_on_the_tensors_device(monkeypatch):
    from ltx_kernels.triton import direct_launcher

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    devs = _Devices(monkeypatch)
    streams = []

    class Compiled:
        function, packed_metadata = object(), object()

        @staticmethod
        def run(g0, g1, g2, stream, *rest):
            streams.append(stream)
            devs.kernel()

    x = torch.Tensor._make_subclass(_OnCuda1, torch.zeros(4))
    launch = direct_launcher(Compiled, (2,), (x, 7), 1)
    launch(x)
    devs.current = 1
    launch(x)
    assert devs.seen == [1, 1] and streams == [1001, 1001] and devs.current == 1


def test_the_tma_scratch_allocator_is_set_in_every_launching_thread():
    """Triton asks the launching thread's allocator (a ContextVar) for the TMA GEMM's descriptor
    scratch: a flag set once by the first thread left every other thread without one."""
    import threading

    from ltx_kernels.triton import fp8_gemm as kg

    if kg._ALLOCATOR_VAR is None:
        pytest.skip("this Triton keeps no per-thread allocator")
    seen = []

    def launch_thread():
        kg._ensure_allocator()
        seen.append(kg._ALLOCATOR_VAR.get() is kg._allocate)

    for _ in range(2):
        t = threading.Thread(target=launch_thread)
        t.start()
        t.join()
    assert seen == [True, True]


def test_torch_backend_records_no_autograd_history(device):
    """The references are differentiable torch code; the ops record no history on any backend."""
    x = torch.randn(2, 256, device=device, requires_grad=True)
    c = torch.randn(256, device=device)
    outs = [lk.rms_norm_rope(x, c, c, backend="torch"), *lk.quantize_blockwise(x, backend="torch"),
            *lk.quantize_weights_blockwise(torch.randn(128, 256, device=device, requires_grad=True), backend="torch"),
            lk.gated_attention(x, torch.randn(2, 2, device=device), False, backend="torch")[0]]
    q, s = lk.quantize_blockwise(x.detach(), backend="torch")
    outs.append(lk.dequantize_blockwise(q, s.detach().requires_grad_(), backend="torch"))
    assert not any(o.requires_grad for o in outs)


def test_malformed_config_cache_is_ignored_with_a_warning(tmp_path, monkeypatch, caplog, device):
    """A hand-edited cache, or one of another version (a config without the keys the kernel reads
    now): the op runs with its heuristic config, and a warning names the file."""
    from ltx_kernels import tuning

    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    cache = f"{tuning._file_stem(tuning.device_name(device))}.json"  # the cache of the device under test
    x = torch.randn(3, 256, device=device)
    for text in ('{"configs": null}', '{"configs": [1]}', '{"configs": {"quantize|x": 1}}',
                 '{"configs": {"k|1": {"config": {"OLD_NAME": 3}}}}'):
        (tmp_path / cache).write_text(text)
        tuning._memory.clear()
        tuning._choices.clear()
        tuning._warned.clear()  # (each file warns once a process)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ltx_kernels"):
            assert tuning.choose("k", (1,), {"BLOCK": 8}, device=device) == {"BLOCK": 8}
            lk.quantize_blockwise(x, backend="triton")
        if "OLD_NAME" in text:
            assert "lacks ['BLOCK']" in caplog.text and "another version's" in caplog.text
        else:
            assert cache in caplog.text and "ignored" in caplog.text, text
    # keys some configs of a kernel have and others not are optional (the GEMM's PERSISTENT)
    (tmp_path / "cpu.json").write_text('{"configs": {"k|2": {"config": {"BLOCK": 4, "num_warps": 2}}}}')
    tuning._memory.clear()
    candidates = lambda: [{"BLOCK": 4}, {"BLOCK": 2, "PERSISTENT": True}]  # noqa: E731
    assert tuning.choose("k", (2,), {"BLOCK": 8, "PERSISTENT": True}, candidates, device="cpu") == \
        {"BLOCK": 4, "num_warps": 2}
    tuning._memory.clear()
    tuning._choices.clear()


def test_config_cache_keeps_every_record_of_concurrent_writers(tmp_path):
    """Processes tuning at once: each store is a read-modify-write of one file, under a lock."""
    code = ("import sys; from ltx_kernels import tuning\n"
            "[tuning.store('k', (sys.argv[1], i), {'A': i}, 0.1, 'cpu') for i in range(60)]")
    env = dict(os.environ, LTX_KERNELS_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code, tag], env=env) for tag in ("a", "b", "c")]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    import json

    assert len(json.loads((tmp_path / "cpu.json").read_text())["configs"]) == 180
