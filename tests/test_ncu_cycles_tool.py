"""tools/ncu_cycles.py: the cycle counts read from an ncu text report, in launch order, and their
table (labels from the library names). Made-up report lines; no ncu, no GPU."""
import importlib.util
import pathlib

spec = importlib.util.spec_from_file_location(
    "ncu_cycles", pathlib.Path(__file__).resolve().parents[1] / "tools/ncu_cycles.py")
C = importlib.util.module_from_spec(spec)
spec.loader.exec_module(C)

REPORT = """==PROF== Disconnected from process 123
  void ltx_gemm_sm90::<unnamed>::fp8_gemm_kernel<192, 128, 1, 1>(CUtensorMap_st, ltx_gemm_sm90::Params) (132, 1, 1)x(512, 1, 1), Context 1
    Section: Command line profiler metrics
    ---------------------- ----------- ------------
    Metric Name            Metric Unit Metric Value
    ---------------------- ----------- ------------
    sm__cycles_elapsed.max       cycle      353,558
  void ltx_gemm_sm90::<unnamed>::fp8_gemm_kernel<256, 128, 1, 1>(CUtensorMap_st, ltx_gemm_sm90::Params) (132, 1, 1)x(384, 1, 1), Context 1
    sm__cycles_elapsed.max       cycle    1,255,637
  void deep_gemm::sm90_fp8_gemm_1d2d_bias_impl<0, 8192, 2048, 1, 256, 128>(float *) (132, 1, 1)x(384, 1, 1), Context 1
    sm__cycles_elapsed.max       cycle         9876
"""


def test_cycles_are_read_in_launch_order():
    assert C.parse_cycles(REPORT) == [353558, 1255637, 9876]
    assert C.parse_cycles("no metrics here") == []


def test_labels_name_the_library_or_the_extension():
    assert C.label("/x/libs/libsm90_noepi.so@256x128x1") == "noepi@256x128x1"
    assert C.label("256x128x2") == "extension@256x128x2"


def test_table_has_a_row_a_kernel_and_marks_missing_values():
    text = C.table(["a", "b"], ["8x8x8", "16x16x16"], {"8x8x8": [1200, 34], "16x16x16": [5]})
    lines = text.splitlines()
    assert len(lines) == 3 and "8x8x8" in lines[0] and "16x16x16" in lines[0]
    assert "1,200" in lines[1] and "5" in lines[1]
    assert lines[2].split()[-1] == "-"
