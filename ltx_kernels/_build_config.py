"""How the CUDA extensions are built: sources, flags and target arches, defined once.

``setup.py`` (ahead of time, into the wheel or the source tree) and ``ltx_kernels._jit`` (on first
use, into the cache) both build from these definitions, so the two paths compile the same sources
with the same flags. ``setup.py`` loads this file by path before the package is installed, so it
uses the standard library only.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Arches built when nothing says which (no GPU visible, TORCH_CUDA_ARCH_LIST unset): the ones the
# package is written for, as far as the nvcc at hand can target them.
SUPPORTED_ARCHS = ("8.0", "8.9", "9.0", "10.0", "12.0")
MIN_ARCH = (8, 0)  # the All2All kernel's acquire/release PTX and the Triton kernels' floor
# Part of the compile cache's key: changed when the way of building changes outside the flags.
BUILD_VERSION = 1
# torch >= 2.10 headers need C++20.
NVCC_COMMON = ("-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo")
CXX_COMMON = ("-O3", "-std=c++20")


@dataclass(frozen=True)
class ExtensionSpec:
    name: str  # module name inside the ltx_kernels package
    folder: str  # under csrc/
    what: str
    # Built for this one arch (with its "a" features) and only when its base arch is a target;
    # None: built for every target arch.
    only_arch: str | None = None


EXTENSIONS = {
    "_C_all2all": ExtensionSpec("_C_all2all", "all2all", "CUDA-IPC All2All (csrc/all2all)"),
    "_C_gemm_sm90": ExtensionSpec("_C_gemm_sm90", "gemm_sm90",
                                  "SM90 wgmma/TMA blockwise FP8 GEMM (csrc/gemm_sm90)", only_arch="9.0a"),
}


def spec(name: str) -> ExtensionSpec:
    if name not in EXTENSIONS:
        raise ValueError(f"name must be one of {sorted(EXTENSIONS)}, got {name!r}")
    return EXTENSIONS[name]


# --------------------------------------------------------------------------------------- sources

def csrc_root(package_dir: Path) -> Path | None:
    """Where the CUDA sources are: ``ltx_kernels/_csrc`` in a wheel (setup.py copies them there),
    ``csrc/`` beside the package in a source tree or an editable install."""
    package_dir = Path(package_dir)
    for cand in (package_dir / "_csrc", package_dir.parent / "csrc"):
        if all((cand / s.folder).is_dir() for s in EXTENSIONS.values()):
            return cand
    return None


def sources(root: Path, s: ExtensionSpec) -> list[Path]:
    """The compiled files: the .cu files, then the .cpp bindings."""
    folder = Path(root) / s.folder
    return sorted(folder.glob("*.cu")) + sorted(folder.glob("*.cpp"))


def source_files(root: Path, s: ExtensionSpec) -> list[Path]:
    """Everything the build reads from csrc (headers too): what the cache key hashes."""
    folder = Path(root) / s.folder
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".cu", ".cuh", ".cpp", ".h", ".hpp"))


# --------------------------------------------------------------------------------------- arches

def parse_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST's syntax ("8.0;9.0+PTX", "8.0 9.0", "9.0a") -> ["8.0", "9.0", "9.0a"]."""
    out = []
    for a in re.split(r"[;, ]+", text.strip()):
        a = a.replace("+PTX", "").strip()
        if not a:
            continue
        if not re.fullmatch(r"\d+\.\d+[af]?", a):
            raise ValueError(f"TORCH_CUDA_ARCH_LIST: {a!r} is not an arch like 9.0 (in {text!r})")
        if a not in out:
            out.append(a)
    return out


def base_arch(arch: str) -> str:
    return arch.rstrip("af")


def arch_tuple(arch: str) -> tuple[int, int]:
    major, minor = base_arch(arch).split(".")
    return int(major), int(minor)


def sm(arch: str) -> str:
    """"9.0a" -> "sm_90a"."""
    return "sm_" + arch.replace(".", "")


def targets(s: ExtensionSpec, archs: list[str]) -> list[str]:
    """The arches ``s`` is compiled for when ``archs`` are requested ([] when it is not built)."""
    if s.only_arch is not None:
        return [s.only_arch] if any(base_arch(a) == base_arch(s.only_arch) for a in archs) else []
    out = []
    for a in archs:
        if base_arch(a) not in out:
            out.append(base_arch(a))
    return out


def gencode(arch: str) -> str:
    a = arch.replace(".", "")
    return f"-gencode=arch=compute_{a},code=sm_{a}"


def runs_on(built: list[str], cap: tuple[int, int]) -> bool:
    """Whether code built for ``built`` runs on a device of compute capability ``cap``: a cubin
    runs on its own major version at the same or a higher minor; "a" features on their arch only."""
    for a in built:
        major, minor = arch_tuple(a)
        if a.endswith(("a", "f")):
            if (major, minor) == tuple(cap):
                return True
        elif major == cap[0] and minor <= cap[1]:
            return True
    return False


# --------------------------------------------------------------------------------------- flags

def nvcc_flags(targets_: list[str]) -> list[str]:
    return list(NVCC_COMMON) + [gencode(a) for a in targets_]


def cxx_flags(torch_dir: Path | None) -> list[str]:
    """The host compiler's flags. torch's CUDA headers include cusparse.h & co, which a bare toolkit
    may lack while the nvidia-* wheels next to torch have them: searched last, for the C++ files."""
    flags = list(CXX_COMMON)
    site = Path(torch_dir).resolve().parent / "nvidia" if torch_dir else None
    if site is not None and site.is_dir():
        for inc in sorted(site.glob("*/include")):
            flags += ["-idirafter", str(inc)]
    return flags


# --------------------------------------------------------------------------------------- toolkit

def toolkit_home(environ=None, fallbacks=("/usr/local/cuda",)) -> tuple[str | None, str | None]:
    """(CUDA toolkit root, None) or (None, why not). torch guesses the root from nvcc's folder,
    which misses when nvcc on PATH is a wrapper or a link outside the toolkit (/usr/local/bin/nvcc);
    a root counts when it has bin/nvcc and include/cuda_runtime.h."""
    env = os.environ if environ is None else environ

    def ok(root) -> bool:
        r = Path(root)
        return (r / "bin" / "nvcc").is_file() and (r / "include" / "cuda_runtime.h").is_file()

    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            if ok(env[var]):
                return str(Path(env[var])), None
            return None, f"{var}={env[var]} is not a CUDA toolkit (needs bin/nvcc and include/cuda_runtime.h)"
    cands = []
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent)
    cands += [Path(f) for f in fallbacks]
    for c in cands:
        if ok(c):
            return str(c), None
    if nvcc:
        return None, (f"nvcc at {nvcc} is not inside a CUDA toolkit with include/cuda_runtime.h "
                      f"(set CUDA_HOME to the toolkit's root)")
    return None, "nvcc not found (install the CUDA toolkit, put its bin/ on PATH or set CUDA_HOME)"


def nvcc_version(nvcc: str) -> tuple[str | None, str]:
    """("13.0", nvcc's full --version text) or (None, why not)."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{nvcc} --version failed: {e}"
    m = re.search(r"release (\d+\.\d+)", out)
    return (m.group(1) if m else None), out.strip()


def nvcc_archs(nvcc: str) -> set[str]:
    """The arches this nvcc can target, as "9.0"."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    archs = set()
    for word in out.split():
        if word.startswith("compute_"):
            v = word[len("compute_"):].rstrip("af")
            if v.isdigit() and len(v) >= 2:
                archs.add(f"{v[:-1]}.{v[-1]}")
    return archs


def default_archs(have: set[str]) -> list[str]:
    return [a for a in SUPPORTED_ARCHS if a in have] or ["9.0"]
