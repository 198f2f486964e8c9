"""tools/gemm_ratios.py on runs written here: the per-shape ratios and the cluster load factor."""
import importlib.util
import math
import pathlib

import pytest

from ltx_kernels import gemm

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gemm_ratios", ROOT / "tools/gemm_ratios.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def row(shape, protocol, cuda, cluster, deep_gemm=None, config="256x128x1/1"):
    return {"shape": shape, "protocol": protocol, "cuda_config": config, "cuda": cuda,
            "cuda@256x128x2": cluster, "deep_gemm": deep_gemm}


def test_ratios_are_means_of_each_runs_ratio():
    runs = [[row("8192x4096x4096", "sustained", 1000.0, 1100.0, 1000.0)],
            [row("8192x4096x4096", "sustained", 1000.0, 900.0, None)]]
    lines = tool.ratios(runs, [("cuda@256x128x2", "cuda"), ("cuda", "deep_gemm")])
    assert "1.000 (1.100, 0.900)" in lines[1]
    assert "1.000 (1.000)" in lines[1]  # a run without the anchor is left out, not counted as zero


def test_cluster_load_factor_is_measured_over_the_cycle_models_prediction():
    m, n, k = 32768, 4096, 4096
    predicted = (gemm._sm90_cost(m, n, (256, 128, 1), 132, k // 128, under_load=False)
                 / gemm._sm90_cost(m, n, (256, 128, 2), 132, k // 128, under_load=False))
    runs = [[row(f"{m}x{n}x{k}", "sustained", 1000.0, 1020.0),
             row("1024x4096x4096", "sustained", 1000.0, 900.0)]]  # one wave: not counted
    lines = tool.cluster_load_factor(runs)
    assert len(lines) == 2 and lines[0].startswith(f"{m}x{n}x{k}")
    mean = float(lines[1].split("geometric mean ")[1].split()[0])
    assert mean == pytest.approx(1.02 / predicted, abs=1e-3)
    assert math.isclose(float(lines[0].split("ratio ")[1]), 1.02 / predicted, abs_tol=1e-3)


def test_cluster_load_factor_reads_runs_where_the_host_picked_the_cluster():
    m, n, k = 32768, 4096, 4096
    assert gemm.sm90_tile_config(m, n, 132, k) == (256, 128, 2)
    predicted = (gemm._sm90_cost(m, n, (256, 128, 1), 132, k // 128, under_load=False)
                 / gemm._sm90_cost(m, n, (256, 128, 2), 132, k // 128, under_load=False))
    runs = [[{"shape": f"{m}x{n}x{k}", "protocol": "sustained", "cuda_config": "256x128x2/1", "cuda": 1030.0,
              "cuda@256x128x1": 1000.0, "cuda@256x128x1_mhz": 1500.0}]]
    lines = tool.cluster_load_factor(runs)
    assert len(lines) == 2 and "one-CTA (256, 128, 1)" in lines[0]
    assert float(lines[0].split("ratio ")[1]) == pytest.approx(1.03 / predicted, abs=1e-3)


def test_split_clock_factors_each_ratio_into_clock_and_work_per_clock():
    def probed(cuda, cuda_mhz, dg, dg_mhz):
        return {"shape": "8192x4096x4096", "protocol": "probed", "cuda_config": "256x128x2/1", "cuda": cuda,
                "cuda_probe_mhz": cuda_mhz, "deep_gemm": dg, "deep_gemm_probe_mhz": dg_mhz}

    runs = [[probed(1100.0, 1400.0, 1000.0, 1400.0)], [probed(990.0, 1260.0, 1000.0, 1400.0)]]
    line = tool.ratios(runs, [("cuda", "deep_gemm")], split_clock=True)[1]
    assert "1.045 (1.100, 0.990) = clock 0.950 (1.000, 0.900) x per clock 1.100 (1.100, 1.100)" in line
    assert "clock" not in tool.ratios(runs, [("cuda", "deep_gemm")])[1]  # only when asked


def test_by_predecessor_compares_backends_after_the_same_neighbour():
    shuffled = {"shape": "8192x8192x2048", "protocol": "interleaved_shuffled", "cuda_config": "256x128x2/1",
                "cuda": 990.0, "deep_gemm": 1000.0,
                "cuda_after": {"start": 900.0, "cuda": 1000.0, "deep_gemm": 980.0},
                "deep_gemm_after": {"cuda": 1000.0, "deep_gemm": 1000.0}}
    line = tool.ratios([[shuffled]], [("cuda", "deep_gemm")], by_predecessor=True)[1]
    assert line.split()[3] == "0.990"
    assert "after cuda 1.000 (1.000)" in line and "after deep_gemm 0.980 (0.980)" in line
    assert "after start" not in line  # the first call follows the head-start sleep, no backend
    assert "after each other 0.980 (0.980)" in line  # cuda after deep_gemm over deep_gemm after cuda
    assert "after" not in tool.ratios([[shuffled]], [("cuda", "deep_gemm")])[1]  # only when asked
