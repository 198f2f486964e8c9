"""``python -m ltx_kernels`` (self-check coverage, summary, exit code) and
``python -m ltx_kernels.warmup --check`` without a GPU."""
import json

import pytest
import torch

from ltx_kernels import __main__ as main_mod
from ltx_kernels import _cases, tuning, warmup

PUBLIC_OPS = ["rms_norm_rope", "rms_norm_split_rope", "fp6_pack", "fp6_unpack", "quantize_blockwise",
              "quantize_weights_blockwise", "dequantize_blockwise", "quantize_adanorm", "quantize_rms_fma",
              "gated_attention", "fp8_gemm_nt"]


def test_every_public_op_is_checked():
    names = [c.name for c in _cases.CASES]
    for op in PUBLIC_OPS + ["BlockwiseFP8Linear", "BlockwiseFP6Linear"]:
        assert op in names
    assert any(n.startswith("All2All") for n in names)


def test_summary_never_claims_all_passed_with_skips():
    s = main_mod.summary(27, [("fp8_gemm_nt", "cuda", "needs CUDA tensors")], [])
    assert s.splitlines()[0] == "27 checked, 1 skipped (fp8_gemm_nt cuda: needs CUDA tensors)"
    assert "all checks passed" not in s
    assert main_mod.summary(5, [], []).splitlines() == ["5 checked, 0 skipped", "all checks passed"]
    s = main_mod.summary(5, [], [("fp6_pack", "triton", "bits differ")])
    assert "1 FAILED: fp6_pack triton: bits differ" in s and "all checks passed" not in s
    assert "all checks passed" not in main_mod.summary(0, [], [])


def _run_main(capsys, argv):
    rc = main_mod.main(argv)
    return rc, capsys.readouterr().out


def test_a_failing_check_fails_the_run(capsys, monkeypatch):
    good = next(c for c in _cases.CASES if c.name == "fp6_pack")
    bad = _cases.Case("fp6_pack", good.make, good.run, good.reference, lambda got, want: "bits differ",
                      good.traffic, op=good.op, probe=good.probe)
    monkeypatch.setattr(_cases, "CASES", [bad])
    rc, out = _run_main(capsys, ["--no-bench"])
    assert rc == 1
    assert "FAIL: bits differ" in out and "FAILED: fp6_pack" in out


def test_an_exception_is_a_failure(capsys, monkeypatch):
    good = next(c for c in _cases.CASES if c.name == "fp6_unpack")

    def boom(d, be):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(_cases, "CASES", [_cases.Case("fp6_unpack", good.make, boom, good.reference, good.check,
                                                      good.traffic, op=good.op, probe=good.probe)])
    rc, out = _run_main(capsys, ["--no-bench"])
    assert rc == 1 and "RuntimeError: kernel exploded" in out


def _write_cache(path, device, configs):
    path.write_text(json.dumps({"device": device, "configs": {
        k: {"config": v, "ms": 1.0, "when": "2026-01-01 00:00:00"} for k, v in configs.items()}}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path of --check")
def test_warmup_check_without_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LTX_KERNELS_CACHE_DIR", str(tmp_path))
    shipped, _ = tuning.tables("NVIDIA H200")
    some_shipped = next(k for k in shipped if k.startswith("fp8_gemm_nt|"))
    _write_cache(tmp_path / "NVIDIA_H200.json", "NVIDIA H200", {some_shipped: {"BLOCK_M": 64}})
    _write_cache(tmp_path / "Fake_GPU.json", "Fake GPU", {"fp6|pack": {"BLOCK": 1024}})
    rc = warmup.main(["--check", "--quick"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "visible GPU: none" in out
    assert "device NVIDIA H200:" in out and "device Fake GPU:" in out
    assert "cached (overrides the shipped one)" in out
    h200 = out.split("device NVIDIA H200:")[1].split("device Fake GPU:")[0]
    fake = out.split("device Fake GPU:")[1]
    assert "1 cached," in h200 and " shipped, " in h200
    assert "fp6 pack" in fake and "1 cached, 0 shipped" in fake and "MISSING" in fake


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path of the warmup")
def test_warmup_tuning_needs_a_gpu(capsys):
    assert warmup.main(["--quick"]) == 2
    assert "--check" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the benchmark")
def test_cpu_benchmark_prints_no_numbers(capsys, monkeypatch):
    monkeypatch.setattr(_cases, "CASES", [c for c in _cases.CASES if c.name == "fp6_pack"])
    rc, out = _run_main(capsys, [])
    assert rc == 0
    assert "benchmark: needs a GPU" in out
    assert "GB/s" not in out and "TFLOP/s" not in out and "nan" not in out


def test_bad_settings_are_usage_errors(capsys, monkeypatch):
    monkeypatch.setenv("LTX_KERNELS_BACKEND", "gpu")
    assert main_mod.main(["--no-bench"]) == 2
    assert "LTX_KERNELS_BACKEND must be one of" in capsys.readouterr().err
    for bad in ("abc", "1x2", "64x100x128"):
        with pytest.raises(SystemExit) as e:
            warmup.main(["--check", "--shapes", bad])
        assert e.value.code == 2
        assert "--shapes" in capsys.readouterr().err
