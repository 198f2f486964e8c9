"""Compiling the CUDA extensions on first use (ltx_kernels/_jit.py), without a GPU or a compiler:
the cache key, the lock between processes, failure handling and the reasons given."""
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _build_config as cfg
from ltx_kernels import _ext, _jit

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def toolchain(tmp_path, monkeypatch):
    """A complete toolchain as _jit sees it, over a copy of csrc/, with the cache in tmp_path."""
    csrc = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", csrc)
    tc = _jit.Toolchain(torch_version="2.14.1+cu130", torch_cuda="13.0", cuda_home="/opt/cuda",
                        nvcc="/opt/cuda/bin/nvcc", nvcc_release="13.0", nvcc_text="release 13.0, V13.0.88",
                        nvcc_archs={"8.0", "8.9", "9.0", "10.0", "12.0"}, ninja="/usr/bin/ninja", csrc=csrc)
    monkeypatch.setattr(_jit, "toolchain", lambda: tc)
    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path / "cache"))
    return tc


def _key(name, tc):
    return _jit.key(_jit.key_inputs(name, tc))


def test_key_changes_with_sources_flags_torch_nvcc(toolchain, monkeypatch):
    tc = toolchain
    base = _key("_C_gemm_sm90", tc)
    assert _key("_C_gemm_sm90", tc) == base  # deterministic
    assert _key("_C_all2all", tc) != base

    header = tc.csrc / "gemm_sm90" / "fp8_gemm_sm90.h"
    text = header.read_text()
    header.write_text(text + "\n// changed\n")
    assert _key("_C_gemm_sm90", tc) != base  # headers count, not only the compiled files
    header.write_text(text)
    assert _key("_C_gemm_sm90", tc) == base

    monkeypatch.setattr(cfg, "NVCC_COMMON", cfg.NVCC_COMMON + ("-DEXTRA",))
    assert _key("_C_gemm_sm90", tc) != base
    monkeypatch.undo()
    monkeypatch.setattr(_jit, "toolchain", lambda: tc)

    for field, value in (("torch_version", "2.11.0+cu130"), ("torch_cuda", "13.1"),
                         ("nvcc_text", "release 13.0, V13.0.99"), ("cuda_home", "/usr/local/cuda-13.1")):
        old = getattr(tc, field)
        setattr(tc, field, value)
        assert _key("_C_gemm_sm90", tc) != base, field
        setattr(tc, field, old)
    assert _key("_C_gemm_sm90", tc) == base


def test_plan_folder_names_the_arches_and_lives_in_the_cache(toolchain, tmp_path):
    p, why = _jit.plan("_C_all2all", ["8.0", "9.0"])
    assert why is None and p.targets == ["8.0", "9.0"]
    assert p.folder.parent == tmp_path / "cache" / "extensions" / "_C_all2all"
    assert p.folder.name.endswith("-sm_80_sm_90") and p.folder.name.startswith("torch2.14.1_cu130-")
    q, _ = _jit.plan("_C_all2all", ["9.0"])
    assert q.folder != p.folder and q.folder.name[:-len("sm_90")] == p.folder.name[:-len("sm_80_sm_90")]
    g, _ = _jit.plan("_C_gemm_sm90", ["8.0", "9.0", "10.0"])
    assert g.targets == ["9.0a"]  # the SM90 kernel is built for sm_90a alone
    assert "-gencode=arch=compute_90a,code=sm_90a" in cfg.nvcc_flags(g.targets)


def _fake_builder(log):
    """Stands in for the compiler: counts its runs, takes a moment, writes the module file."""
    def build(p, log_path, progress):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        p.module_path.write_bytes(b"not really a module")
        log_path.write_text("[1/1] fake\n")
        return 0, "[1/1] fake\n"
    return build


def _ensure_in_child(log, queue):
    path, meta = _jit.ensure("_C_all2all", archs=["9.0"], builder=_fake_builder(log), announce=False)
    queue.put((str(path), meta.get("fresh", False)))


def test_two_processes_compile_once(toolchain, tmp_path):
    log = tmp_path / "builds.txt"
    ctx = multiprocessing.get_context("fork")  # the children keep the stub toolchain
    queue = ctx.Queue()
    procs = [ctx.Process(target=_ensure_in_child, args=(log, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(log.read_text().split()) == 1  # one compile; the other process waited for it
    assert len({path for path, _ in results}) == 1
    assert sorted(fresh for _, fresh in results) == [False, True]
    assert (Path(results[0][0]).parent / "ok.json").is_file()


def test_lock_of_a_killed_process_is_released(tmp_path):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from ltx_kernels._jit import file_lock
        with file_lock(Path({str(lock)!r})):
            print("held", flush=True)
            time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        waited = []
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        t0 = time.time()
        with _jit.file_lock(lock, lambda: waited.append(1)):
            pass
        assert time.time() - t0 < 10
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_compatible_cached_build_is_reused(toolchain):
    built, meta = _jit.ensure("_C_all2all", archs=["8.0", "9.0"], builder=_fake_builder(toolchain.csrc / "n"),
                              announce=False)
    assert meta["fresh"] and meta["targets"] == ["8.0", "9.0"]
    # A build for more arches serves a process that needs only one of them: no compile.
    again, meta2 = _jit.ensure("_C_all2all", archs=["9.0"], builder=None, compile=False)
    assert again == built and not meta2.get("fresh")
    missing, why = _jit.ensure("_C_all2all", archs=["10.0"], compile=False)
    assert missing is None and "not compiled yet for sm_100" in why


def test_compile_error_is_reported_and_not_retried(toolchain, capsys):
    runs = []

    def failing(p, log_path, progress):
        runs.append(1)
        text = ("[1/3] nvcc ...\nfp8_gemm_sm90_kernel.cu(12): error: identifier \"oops\" is undefined\n"
                "ninja: build stopped: subcommand failed.\n")
        log_path.write_text(text)
        return 1, text

    path, why = _jit.ensure("_C_gemm_sm90", archs=["9.0"], builder=failing)
    assert path is None and len(runs) == 1
    assert 'error: identifier "oops" is undefined' in why and "build.log" in why
    err = capsys.readouterr().err
    assert "compiling the CUDA extension _C_gemm_sm90 for sm_90a" in err and "failed after" in err
    path, why = _jit.ensure("_C_gemm_sm90", archs=["9.0"], builder=failing)
    assert path is None and len(runs) == 1 and "an earlier compile" in why and "--force" in why
    path, why = _jit.ensure("_C_gemm_sm90", archs=["9.0"], builder=failing, force=True)
    assert len(runs) == 2


def test_compile_announces_start_and_time(toolchain, capsys):
    path, meta = _jit.ensure("_C_all2all", archs=["9.0"], builder=_fake_builder(toolchain.csrc / "n"))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0].startswith("ltx_kernels: compiling the CUDA extension _C_all2all for sm_90 (first use")
    assert str(path.parent) in err[0]
    assert err[1].startswith("ltx_kernels: _C_all2all compiled in ")


def test_reasons_without_a_toolchain(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.version, "cuda", None)
    _jit.toolchain.cache_clear()
    try:
        assert "CPU-only build" in _jit.toolchain().why
        monkeypatch.setattr(torch.version, "cuda", "13.0")
        monkeypatch.setattr(cfg, "toolkit_home", lambda: (None, "nvcc not found (install the CUDA toolkit, ...)"))
        _jit.toolchain.cache_clear()
        assert _jit.toolchain().why.startswith("nvcc not found")
        monkeypatch.setattr(cfg, "toolkit_home", lambda: ("/opt/cuda", None))
        monkeypatch.setattr(cfg, "nvcc_version", lambda nvcc: ("12.4", "release 12.4"))
        _jit.toolchain.cache_clear()
        why = _jit.toolchain().why
        assert "nvcc 12.4" in why and "CUDA 13.0" in why and "major version" in why
    finally:
        _jit.toolchain.cache_clear()


def test_toolkit_home_messages(tmp_path):
    assert cfg.toolkit_home({"PATH": str(tmp_path)}, fallbacks=())[1].startswith("nvcc not found")
    home, why = cfg.toolkit_home({"CUDA_HOME": str(tmp_path), "PATH": ""}, fallbacks=())
    assert home is None and f"CUDA_HOME={tmp_path}" in why
    # A wrapper script on PATH, outside the toolkit (as /usr/local/bin/nvcc can be)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "nvcc").chmod(0o755)
    home, why = cfg.toolkit_home({"PATH": str(tmp_path / "bin")}, fallbacks=())
    assert home is None and "not inside a CUDA toolkit" in why and "CUDA_HOME" in why
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    assert cfg.toolkit_home({"PATH": str(tmp_path / "bin")}, fallbacks=()) == (str(tmp_path), None)


def test_arch_reasons(toolchain):
    tc = toolchain
    a2a, sm90 = cfg.spec("_C_all2all"), cfg.spec("_C_gemm_sm90")
    assert _jit._arch_reasons(a2a, ["9.0"], "x", tc) == (["9.0"], None)
    _, why = _jit._arch_reasons(a2a, ["7.5"], "the visible GPUs", tc)
    assert why == "the visible GPUs: sm_75 is older than sm_80, the oldest these kernels support"
    _, why = _jit._arch_reasons(sm90, ["8.9"], "the visible GPUs", tc)
    assert why == "_C_gemm_sm90 is built for sm_90a (H100/H200) only; the visible GPUs: sm_89"
    tc.nvcc_archs = {"8.0", "8.9"}
    _, why = _jit._arch_reasons(sm90, ["9.0"], "x", tc)
    assert why.startswith("nvcc 13.0 cannot target sm_90a")


def test_build_config_arches():
    assert cfg.parse_arch_list("8.0;9.0+PTX 9.0a,12.0") == ["8.0", "9.0", "9.0a", "12.0"]
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        cfg.parse_arch_list("sm_90")
    assert cfg.targets(cfg.spec("_C_all2all"), ["9.0a", "9.0", "8.0"]) == ["9.0", "8.0"]
    assert cfg.targets(cfg.spec("_C_gemm_sm90"), ["8.0"]) == []
    assert cfg.gencode("10.0") == "-gencode=arch=compute_100,code=sm_100"
    assert cfg.runs_on(["8.0"], (8, 6)) and not cfg.runs_on(["8.9"], (8, 6))
    assert cfg.runs_on(["9.0a"], (9, 0)) and not cfg.runs_on(["9.0a"], (10, 0))
    assert not cfg.runs_on(["9.0"], (10, 0))
    with pytest.raises(ValueError, match="name must be one of"):
        cfg.spec("_C_nope")


def test_sources_are_found_in_the_tree_and_in_a_wheel_layout(tmp_path):
    assert cfg.csrc_root(ROOT / "ltx_kernels") == ROOT / "csrc"
    pkg = tmp_path / "site" / "ltx_kernels"
    shutil.copytree(ROOT / "csrc", pkg / "_csrc")
    assert cfg.csrc_root(pkg) == pkg / "_csrc"
    assert cfg.csrc_root(tmp_path / "elsewhere") is None
    names = [p.name for p in cfg.sources(ROOT / "csrc", cfg.spec("_C_gemm_sm90"))]
    assert names[0].endswith(".cu") and names[-1].endswith(".cpp")


def test_cpu_tensors_never_load_the_extension(monkeypatch):
    def boom(name):
        raise AssertionError("must not load (it could compile) for CPU tensors")

    monkeypatch.setattr(_ext, "load", boom)
    assert _ext.reasons("_C_gemm_sm90", torch.zeros(2), arch=(9, 0)) == ["needs CUDA tensors"]


def test_jit_off_is_the_reason(monkeypatch):
    monkeypatch.setenv("LTX_KERNELS_JIT", "0")
    _ext.load.cache_clear()
    try:
        mod, why = _ext.load("_C_all2all")
        assert mod is None and "LTX_KERNELS_JIT=0" in why and "not prebuilt" in why
    finally:
        _ext.load.cache_clear()


def test_backend_unavailable_names_the_reason(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    _jit.toolchain.cache_clear()
    _ext.load.cache_clear()
    try:
        mod, why = _ext.load("_C_gemm_sm90")
        assert mod is None and "cannot be compiled here" in why and "CPU-only build" in why
        a, sa = lk.quantize_blockwise(torch.randn(4, 128))
        b, sb = lk.quantize_weights_blockwise(torch.randn(128, 128))
        with pytest.raises(lk.BackendUnavailable, match="backend 'cuda' cannot run these inputs: needs CUDA tensors"):
            lk.fp8_gemm_nt(a, sa, b, sb, backend="cuda")
    finally:
        _jit.toolchain.cache_clear()
        _ext.load.cache_clear()


def test_build_command_without_a_toolchain_fails_with_the_reason(monkeypatch, capsys):
    from ltx_kernels.__main__ import main

    monkeypatch.setattr(torch.version, "cuda", None)
    _jit.toolchain.cache_clear()
    try:
        assert main(["build", "--check"]) == 1
        out = capsys.readouterr().out
        assert "FAILED" in out and "CPU-only build" in out
    finally:
        _jit.toolchain.cache_clear()


def test_ninja_progress_lines():
    from ltx_kernels.__main__ import _ninja_step

    assert _ninja_step("[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c "
                       "/x/csrc/gemm_sm90/fp8_gemm_sm90_kernel.cu -o fp8_gemm_sm90_kernel.cuda.o -O3") == \
        "[1/3] nvcc fp8_gemm_sm90_kernel.cu"
    assert _ninja_step("[3/3] c++ a.o b.o -shared -o _C_gemm_sm90.so") == "[3/3] c++ -> _C_gemm_sm90.so"
    assert _ninja_step("warning: something") is None
