"""bench/ltx_core_block.py's SM90 hook (development timing in the real block): --ours-sm90-lib sends
this package's SM90 GEMM launches to a kernel library, --ours-sm90-tiles forces their tile per
entry. Checked on CPU with the library's C entry point and the extension replaced by recorders:
what the library can take goes to it with the right arguments, everything else stays on the
extension; a forced tile reaches whichever runs the launch."""
import pytest
import ctypes
import pathlib
import sys
import types

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
import ltx_core_block  # noqa: E402


def test_sm90_library_hook(monkeypatch):
    launches, forwarded = [], []

    class Entry:
        restype = argtypes = None

        def __call__(self, *args):
            launches.append(args)

    class Library:
        ltx_sm90_launch = Entry()

    class Extension:
        other = "attribute of the extension"

        def fp8_gemm_nt(self, *args):
            forwarded.append(args)

    monkeypatch.setattr(ctypes, "CDLL", lambda path: Library())
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: types.SimpleNamespace(cuda_stream=0))
    ext_module = Extension()
    package = types.SimpleNamespace(_ext=types.SimpleNamespace(load=lambda name: (ext_module, None)))
    hook = ltx_core_block.Sm90Hook(package, pathlib.Path("libsm90_variant.so"))

    mod, why = package._ext.load("_C_gemm_sm90")
    assert why is None and mod.other == Extension.other and package._ext.load("_C_gemm_sm90")[0] is mod
    assert package._ext.load("_C_all2all")[0] is ext_module  # other extensions untouched

    a, b = torch.zeros(256, 512, dtype=torch.uint8), torch.zeros(384, 512, dtype=torch.uint8)
    sa, sb, d = torch.zeros(4, 256).t(), torch.zeros(3, 4), torch.zeros(256, 384)
    mod.fp8_gemm_nt(a, sa, b, sb, None, d, 256, 128, 2, 1)
    mod.fp8_gemm_nt(a, sa, b, sb, torch.zeros(384), d, 192, 128, 1, 1)
    assert len(launches) == 2 and not forwarded
    first, second = launches
    assert first[3] == 256 and first[5:7] == (4, 1) and first[7] is None and first[9] == 384
    assert first[10:17] == (256, 384, 512, 256, 128, 2, 132)
    assert second[7] is not None and second[13:16] == (192, 128, 1)

    mod.fp8_gemm_nt(a, sa, b, sb, None, d, 128, 128, 1, 2)  # K slices
    mod.fp8_gemm_nt(a, sa, b, sb, torch.zeros(384, dtype=torch.bfloat16), d, 256, 128, 1, 1)  # bf16 bias
    mod.fp8_gemm_nt(a[:, :256], sa, b[:, :256], sb, None, d, 256, 128, 1, 1)  # row stride != K
    assert len(launches) == 2 and len(forwarded) == 3

    hook.tile = (128, 128, 2)  # forced: the library gets the forced tile, the extension too
    mod.fp8_gemm_nt(a, sa, b, sb, None, d, 256, 128, 1, 1)
    assert launches[-1][13:16] == (128, 128, 2)
    mod.fp8_gemm_nt(a, sa, b, sb, None, d, 128, 128, 1, 2)
    assert forwarded[-1][6:] == (128, 128, 2, 2)  # K slices as the host chose them


def test_sm90_forced_tiles_without_library():
    forwarded = []

    class Extension:
        def fp8_gemm_nt(self, *args):
            forwarded.append(args[6:])

    ext_module = Extension()
    package = types.SimpleNamespace(_ext=types.SimpleNamespace(load=lambda name: (ext_module, None)))
    hook = ltx_core_block.Sm90Hook(package)
    mod, _ = package._ext.load("_C_gemm_sm90")
    a = torch.zeros(256, 512, dtype=torch.uint8)
    mod.fp8_gemm_nt(a, None, a, None, None, None, 192, 128, 1, 1)
    hook.tile = (256, 128, 2)
    mod.fp8_gemm_nt(a, None, a, None, None, None, 192, 128, 1, 1)
    hook.tile = None
    mod.fp8_gemm_nt(a, None, a, None, None, None, 192, 128, 1, 1)
    assert forwarded == [(192, 128, 1, 1), (256, 128, 2, 1), (192, 128, 1, 1)]


def test_parse_tiles():
    assert ltx_core_block.parse_tiles("256x128x2, 192x128x1") == [(256, 128, 2), (192, 128, 1)]
    assert ltx_core_block.parse_tiles("") == []
    with pytest.raises(ValueError, match="ours-sm90-tiles"):
        ltx_core_block.parse_tiles("256,128,2")


def test_ratios_of_forced_tiles():
    """Each of this package's entries (the host's tiles, each forced tile) gets its own ratio to
    upstream, from the same rounds."""
    def rec(package, rounds):
        return {"variant": "fp8", "package": package, "tokens": 8192, "mode": "eager", "round_medians_ms": rounds,
                "round_mhz": [1800.0] * len(rounds)}
    got = ltx_core_block.ratios([rec("upstream", [10.0, 10.0, 10.0]), rec("ours", [10.2, 10.1, 10.3]),
                                 rec("ours@256x128x2", [9.9, 10.0, 9.8])])
    by = {r["package"]: r["ours_over_upstream"] for r in got}
    assert by == pytest.approx({"ours": 1.02, "ours@256x128x2": 0.99})
