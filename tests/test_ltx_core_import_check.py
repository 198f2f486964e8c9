"""tools/upstream/check_ltx_core_imports.py: what it collects from an ltx-core source tree and how
it resolves it against this package, on a small tree written here (no LTX-2 code)."""
import importlib.util
import pathlib
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_ltx_core_imports", ROOT / "tools/upstream/check_ltx_core_imports.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))


def test_collects_and_resolves(tmp_path, capsys):
    write(tmp_path, "pkg/a.py", """\
        from ltx_kernels.blockwise.functional import (rms_norm_rope,
            fp6_pack_tensor)
        from ltx_kernels import nvfp4 as fp4
        import os.path

        def later():
            from ltx_kernels.vae import na_attn_available
            import ltx_kernels.arch
            return fp4.unavailable_reason(), fp4.no_such_function, os.path.join
        """)
    write(tmp_path, "pkg/b.py", "from ltx_kernels.blockwise.linear import BlockwiseFP8Linear\n")
    write(tmp_path, "pkg/broken.py", "def (:\n")  # not Python: skipped
    refs = tool.references(tmp_path)
    assert set(refs) == {
        "ltx_kernels.blockwise.functional.rms_norm_rope", "ltx_kernels.blockwise.functional.fp6_pack_tensor",
        "ltx_kernels.nvfp4", "ltx_kernels.nvfp4.unavailable_reason", "ltx_kernels.nvfp4.no_such_function",
        "ltx_kernels.vae.na_attn_available", "ltx_kernels.arch", "ltx_kernels.blockwise.linear.BlockwiseFP8Linear"}
    assert refs["ltx_kernels.vae.na_attn_available"] == "pkg/a.py:7"
    assert tool.resolve("ltx_kernels.blockwise.functional.rms_norm_rope") is None
    assert "no attribute 'no_such_function'" in tool.resolve("ltx_kernels.nvfp4.no_such_function")
    assert tool.resolve("ltx_kernels.no_such_module.x") is not None
    assert tool.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "MISSING  ltx_kernels.nvfp4.no_such_function" in out and "8 references, 1 missing" in out
