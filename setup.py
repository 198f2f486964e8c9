"""Build script: the pure-Python package always; the CUDA extensions when a toolchain is there.

LTX_KERNELS_BUILD_CUDA=0 skips the extensions, =1 requires them (the build fails
loudly if impossible); unset builds them when torch is a CUDA build and nvcc is
found. Arches come from TORCH_CUDA_ARCH_LIST (unset: every arch of SUPPORTED_ARCHS
that this nvcc can target). csrc/gemm_sm90 is built only when 9.0 is requested,
for sm_90a (wgmma and setmaxnreg need the "a" target).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
SUPPORTED_ARCHS = ["8.0", "8.9", "9.0", "10.0", "12.0"]


def _say(msg: str) -> None:
    print(f"[ltx_kernels setup] {msg}", file=sys.stderr)


def _nvcc_archs(nvcc: str) -> set[str]:
    try:
        out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    archs = set()
    for line in out.split():
        if line.startswith("compute_"):
            v = line[len("compute_"):].rstrip("af")
            if v.isdigit():
                archs.add(f"{v[:-1]}.{v[-1]}")
    return archs


def _requested_archs(nvcc: str) -> list[str]:
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return [a.replace("+PTX", "").strip() for a in env.replace(",", ";").replace(" ", ";").split(";") if a.strip()]
    have = _nvcc_archs(nvcc)
    return [a for a in SUPPORTED_ARCHS if a in have] or ["9.0"]


def _gencode(arch: str, suffix: str = "") -> str:
    a = arch.replace(".", "").rstrip("a")
    return f"-gencode=arch=compute_{a}{suffix},code=sm_{a}{suffix}"


def _toolkit_home() -> str | None:
    """The CUDA toolkit root: torch guesses it from nvcc's directory, which misses when nvcc is a
    wrapper or link outside the toolkit (e.g. /usr/local/bin/nvcc)."""
    cands = []
    if shutil.which("nvcc"):
        cands.append(Path(shutil.which("nvcc")).resolve().parent.parent)
    cands += [Path("/usr/local/cuda")]
    for c in cands:
        if (c / "include" / "cuda_runtime.h").exists() and (c / "bin" / "nvcc").exists():
            return str(c)
    return None


def cuda_extensions():
    mode = os.environ.get("LTX_KERNELS_BUILD_CUDA", "").strip()
    if mode == "0":
        _say("LTX_KERNELS_BUILD_CUDA=0: skipping the CUDA extensions (pure-Python install).")
        return [], {}
    forced = mode == "1"
    if not os.environ.get("CUDA_HOME"):
        home = _toolkit_home()
        if home:
            os.environ["CUDA_HOME"] = home
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError as e:
        why = f"torch is not importable in the build environment ({e}); use --no-build-isolation"
        if forced:
            raise RuntimeError(f"LTX_KERNELS_BUILD_CUDA=1 but {why}")
        _say(f"skipping the CUDA extensions: {why}.")
        return [], {}
    nvcc = shutil.which("nvcc") or (os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else None)
    why = None
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} is not a CUDA build"
    elif not nvcc or not os.path.exists(nvcc):
        why = "nvcc not found (set CUDA_HOME or put nvcc on PATH)"
    if why:
        if forced:
            raise RuntimeError(f"LTX_KERNELS_BUILD_CUDA=1 but {why}")
        _say(f"skipping the CUDA extensions: {why}. The Triton and torch backends still work.")
        return [], {}

    archs = _requested_archs(nvcc)
    # torch >= 2.10 headers need C++20.
    common = ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo"]
    cxx = ["-O3", "-std=c++20"]
    # torch's CUDA headers include cusparse.h & co, which a bare toolkit may lack while the
    # nvidia-*-cu13 wheels next to torch have them: searched last, for the C++ (binding) files only.
    site = Path(torch.__file__).resolve().parent.parent / "nvidia"
    for inc in sorted(site.glob("*/include")) if site.is_dir() else []:
        cxx += ["-idirafter", str(inc)]
    exts = []
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "all2all").glob("*.cu"))
    if sources:
        exts.append(CUDAExtension(
            "ltx_kernels._C_all2all", sources + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "all2all").glob("*.cpp")),
            extra_compile_args={"cxx": cxx, "nvcc": common + [_gencode(a) for a in archs]}))
    sm90_dir = ROOT / "csrc" / "gemm_sm90"
    sm90_sources = sorted(str(p.relative_to(ROOT)) for p in sm90_dir.glob("*.cu"))
    if sm90_sources and any(a.startswith("9.0") for a in archs):
        sm90_sources += sorted(str(p.relative_to(ROOT)) for p in sm90_dir.glob("*.cpp"))
        exts.append(CUDAExtension(
            "ltx_kernels._C_gemm_sm90", sm90_sources,
            extra_compile_args={"cxx": cxx, "nvcc": common + [_gencode("9.0", "a")]}))
    if not exts:
        _say(f"no CUDA extension to build for arches {archs}.")
        return [], {}
    _say(f"building {[e.name for e in exts]} for arches {archs}")
    return exts, {"build_ext": BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)}


ext_modules, cmdclass = cuda_extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
