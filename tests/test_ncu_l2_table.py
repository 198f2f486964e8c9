"""tools/ncu_l2_table.py: ncu --csv metric rows grouped into one row a launch, in launch order, with
the units scaled (bytes to MB, sectors of 32 bytes to MB, ns to us). Made-up rows; no ncu, no GPU."""
import importlib.util
import pathlib

import pytest

spec = importlib.util.spec_from_file_location(
    "ncu_l2_table", pathlib.Path(__file__).resolve().parents[1] / "tools/ncu_l2_table.py")
T = importlib.util.module_from_spec(spec)
spec.loader.exec_module(T)

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')
OURS = "void ltx_gemm_sm90::<unnamed>::fp8_gemm_kernel<(int)256, (int)128, (int)2, (bool)1>(CUtensorMap_st)"
DEEP = "void deep_gemm::sm90_fp8_gemm_1d2d_bias_impl<0, 4096, 4096>(float *)"


def metric(launch, kernel, name, unit, value):
    return (f'"{launch}","1","python","h","{kernel}","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{name}","{unit}","{value}"\n')


def test_rows_group_by_launch_in_order_with_units_scaled(tmp_path):
    csv = tmp_path / "l2.csv"
    csv.write_text("==PROF== Connected to process 1\n" + HEAD
                   + metric(10, DEEP, "gpu__time_duration.sum", "usecond", "771.80")
                   + metric(2, OURS, "gpu__time_duration.sum", "nsecond", "776,000")
                   + metric(2, OURS, "lts__t_sectors_srcunit_tex_op_read.sum", "sector", "1,000,000")
                   + metric(2, OURS, "dram__bytes_read.sum", "Gbyte", "0.52"))
    runs = T.launches(str(csv))
    assert [T.short(name) for name, _ in runs] == ["ours 256x128x2", "deep_gemm"]  # by ID, not file order
    ours, deep = runs[0][1], runs[1][1]
    assert ours["gpu__time_duration.sum"] == 776000 and deep["gpu__time_duration.sum"] == 771800  # ns
    assert ours["dram__bytes_read.sum"] == pytest.approx(0.52e9)
    assert ours["lts__t_sectors_srcunit_tex_op_read.sum"] * 32e-6 == pytest.approx(32.0)  # MB in the table
