"""Build script: the pure-Python package always; the CUDA extensions ahead of time when it can.

The CUDA extensions are compiled here only when torch is importable in the build environment
(``pip install --no-build-isolation``, ``python setup.py bdist_wheel``): pip's default isolated
build has no torch. Without them the package compiles each extension on its first use and caches
it (``ltx_kernels/_jit.py``); sources, flags and arches come from ``ltx_kernels/_build_config.py``
in both cases.

LTX_KERNELS_BUILD_CUDA=0 skips the extensions, =1 requires them (the build fails loudly if
impossible); unset builds them when torch is a CUDA build and nvcc is found. Arches come from
TORCH_CUDA_ARCH_LIST (unset: every arch of SUPPORTED_ARCHS that this nvcc can target).
csrc/gemm_sm90 is built only when 9.0 is requested, for sm_90a (wgmma and setmaxnreg need the
"a" target).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent


def _load_build_config():
    # By path: the package itself (torch, triton) need not be importable while it is being built.
    path = ROOT / "ltx_kernels" / "_build_config.py"
    spec = importlib.util.spec_from_file_location("_ltx_kernels_build_config", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is created
    spec.loader.exec_module(mod)
    return mod


cfg = _load_build_config()


def _say(msg: str) -> None:
    print(f"[ltx_kernels setup] {msg}", file=sys.stderr)


class BuildPyWithSources(build_py):
    """Copies csrc/ into the package as ltx_kernels/_csrc, so that an installed wheel can still
    compile an extension on first use. An editable install reads csrc/ from the source tree."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dst = Path(self.build_lib) / "ltx_kernels" / "_csrc"
        for s in cfg.EXTENSIONS.values():
            for f in cfg.source_files(ROOT / "csrc", s):
                self.mkpath(str(dst / s.folder))
                self.copy_file(str(f), str(dst / s.folder / f.name))


def cuda_extensions():
    mode = os.environ.get("LTX_KERNELS_BUILD_CUDA", "").strip()
    later = "the package compiles them on first use instead (or now: python -m ltx_kernels build)"
    if mode == "0":
        _say(f"LTX_KERNELS_BUILD_CUDA=0: not building the CUDA extensions here; {later}.")
        return [], {}
    forced = mode == "1"

    def skip(why):
        if forced:
            raise RuntimeError(f"LTX_KERNELS_BUILD_CUDA=1 but {why}")
        _say(f"not building the CUDA extensions here: {why}; {later}.")
        return [], {}

    home, why = cfg.toolkit_home()
    if home and not os.environ.get("CUDA_HOME"):
        os.environ["CUDA_HOME"] = home  # read by torch.utils.cpp_extension when it is imported
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    except ImportError as e:
        return skip(f"torch is not importable in this build environment ({e}; pip's isolated builds "
                    f"have none: pip install --no-build-isolation builds them ahead of time)")
    if torch.version.cuda is None:
        return skip(f"torch {torch.__version__} is not a CUDA build")
    if home is None:
        return skip(why)

    nvcc = str(Path(home) / "bin" / "nvcc")
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    archs = cfg.parse_arch_list(env) if env else cfg.default_archs(cfg.nvcc_archs(nvcc))
    cxx = cfg.cxx_flags(Path(torch.__file__).parent)
    exts = []
    for s in cfg.EXTENSIONS.values():
        tg = cfg.targets(s, archs)
        if not tg:
            continue
        srcs = [str(p.relative_to(ROOT)) for p in cfg.sources(ROOT / "csrc", s)]
        exts.append(CUDAExtension(f"ltx_kernels.{s.name}", srcs,
                                  extra_compile_args={"cxx": cxx, "nvcc": cfg.nvcc_flags(tg)}))
    if not exts:
        _say(f"no CUDA extension to build for arches {archs}.")
        return [], {}
    _say(f"building {[e.name for e in exts]} for arches {archs}")
    return exts, {"build_ext": BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)}


ext_modules, cmdclass = cuda_extensions()
setup(ext_modules=ext_modules, cmdclass={"build_py": BuildPyWithSources, **cmdclass})
