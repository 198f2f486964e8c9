"""Compiling a CUDA extension on first use, cached on disk.

When no module was built ahead of time (pip's default isolated build has no torch, so setup.py
builds none), the first use of an extension compiles it with ``torch.utils.cpp_extension.load``,
from the sources and flags of ``_build_config`` (the ones setup.py uses), into

    $LTX_KERNELS_CACHE_DIR/extensions/<name>/<torch>-<python>-<key>-<arches>/

(default cache: ``~/.cache/ltx-kernels``, shared with the tuned kernel configs). ``<key>`` hashes
everything the binary depends on except the target arches, which the folder names: the source
files' contents, the flags, torch's version, build and CUDA version, the nvcc release, the
toolkit's folder and the Python ABI. A later process with the same key imports the cached module
without compiling, also a build whose arches include every one it needs.

Concurrent processes: the first takes an exclusive ``flock`` on ``<folder>.lock`` and compiles;
the others wait on it, then find the finished build (the kernel drops the lock of a process that
dies, so no stale lock blocks later runs). A build counts only once ``ok.json`` is written, after
the module has been linked and imported by the compiling process. A failed compile leaves
``failed.json`` with the reason and ``build.log``; later processes report that reason instead of
compiling again (``python -m ltx_kernels build`` retries).

The compile runs in a child Python process whose output goes to ``build.log``: the caller sees
one line when it starts and one with its time when it ends.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from . import _build_config as cfg

PACKAGE_DIR = Path(__file__).resolve().parent


def cache_root() -> Path:
    """The package's cache folder (kernel configs and compiled extensions)."""
    d = os.environ.get("LTX_KERNELS_CACHE_DIR")
    return Path(d).expanduser() if d else Path.home() / ".cache" / "ltx-kernels"


def extensions_dir() -> Path:
    return cache_root() / "extensions"


def jit_enabled() -> bool:
    return os.environ.get("LTX_KERNELS_JIT", "1").strip().lower() not in ("0", "false", "off", "no")


def _say(msg: str) -> None:
    print(f"ltx_kernels: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------- toolchain

@dataclass
class Toolchain:
    """What compiling needs; ``why`` is None when everything is there, else the first thing missing."""
    why: str | None = None
    torch_version: str = ""
    torch_cuda: str | None = None
    cuda_home: str | None = None
    nvcc: str | None = None
    nvcc_release: str | None = None
    nvcc_text: str = ""
    nvcc_archs: set = field(default_factory=set)
    ninja: str | None = None
    csrc: Path | None = None

    def summary(self) -> str:
        parts = [f"torch {self.torch_version}" + (f" (CUDA {self.torch_cuda})" if self.torch_cuda else "")]
        if self.nvcc_release:
            parts.append(f"nvcc {self.nvcc_release} ({self.cuda_home})")
        if self.ninja:
            parts.append(f"ninja ({self.ninja})")
        return ", ".join(parts)


def _search_path() -> str:
    """PATH plus the running interpreter's folder, where pip puts the ninja of a venv that was not
    activated."""
    extra = [str(Path(sys.executable).parent)]
    try:
        import ninja  # the PyPI package: its binary's folder

        extra.append(str(ninja.BIN_DIR))
    except (ImportError, AttributeError):
        pass
    return os.pathsep.join(extra + [os.environ.get("PATH", "")])


@functools.lru_cache(maxsize=None)
def toolchain() -> Toolchain:
    tc = Toolchain(torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    if getattr(torch.version, "hip", None):
        tc.why = f"torch {torch.__version__} is a ROCm build; the CUDA extensions need a CUDA build of torch"
        return tc
    if torch.version.cuda is None:
        tc.why = (f"torch {torch.__version__} is a CPU-only build; the CUDA extensions need a CUDA build "
                  f"of torch (pip's default torch on Linux is one)")
        return tc
    tc.cuda_home, why = cfg.toolkit_home()
    if tc.cuda_home is None:
        tc.why = why
        return tc
    tc.nvcc = str(Path(tc.cuda_home) / "bin" / "nvcc")
    tc.nvcc_release, tc.nvcc_text = cfg.nvcc_version(tc.nvcc)
    if tc.nvcc_release is None:
        tc.why = f"cannot read nvcc's version: {tc.nvcc_text}"
        return tc
    if tc.nvcc_release.split(".")[0] != torch.version.cuda.split(".")[0]:
        tc.why = (f"nvcc {tc.nvcc_release} ({tc.cuda_home}) and torch's CUDA {torch.version.cuda} differ in "
                  f"major version, which torch.utils.cpp_extension refuses: use a CUDA "
                  f"{torch.version.cuda.split('.')[0]}.x toolkit (CUDA_HOME) or a torch built for CUDA "
                  f"{tc.nvcc_release.split('.')[0]}")
        return tc
    tc.nvcc_archs = cfg.nvcc_archs(tc.nvcc)
    tc.ninja = shutil.which("ninja", path=_search_path())
    if tc.ninja is None:
        tc.why = "ninja not found, which torch.utils.cpp_extension needs (pip install ninja)"
        return tc
    tc.csrc = cfg.csrc_root(PACKAGE_DIR)
    if tc.csrc is None:
        tc.why = (f"the CUDA sources are not part of this install (neither {PACKAGE_DIR / '_csrc'} nor "
                  f"{PACKAGE_DIR.parent / 'csrc'} exists)")
    return tc


# --------------------------------------------------------------------------------------- arches

def wanted_archs() -> tuple[list[str], str]:
    """(arches to compile for, where they come from): the visible GPUs; without one,
    TORCH_CUDA_ARCH_LIST, else the default list (setup.py's)."""
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return [f"{a}.{b}" for a, b in caps], "the visible GPUs"
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        return cfg.parse_arch_list(env), "TORCH_CUDA_ARCH_LIST (no GPU visible)"
    tc = toolchain()
    return cfg.default_archs(tc.nvcc_archs), "the default list (no GPU visible, TORCH_CUDA_ARCH_LIST unset)"


def _arch_reasons(s: cfg.ExtensionSpec, archs: list[str], origin: str, tc: Toolchain) -> tuple[list, str | None]:
    """(target arches, None) or ([], why not)."""
    names = ", ".join(cfg.sm(a) for a in archs) or "none"
    old = [a for a in archs if cfg.arch_tuple(a) < cfg.MIN_ARCH]
    if s.only_arch is None and old:
        return [], (f"{origin}: {', '.join(cfg.sm(a) for a in old)} is older than "
                    f"{cfg.sm('%d.%d' % cfg.MIN_ARCH)}, the oldest these kernels support")
    tg = cfg.targets(s, archs)
    if not tg:
        return [], f"{s.name} is built for {cfg.sm(s.only_arch)} (H100/H200) only; {origin}: {names}"
    if tc.nvcc_archs:
        missing = [a for a in tg if cfg.base_arch(a) not in tc.nvcc_archs]
        if missing:
            return [], (f"nvcc {tc.nvcc_release} cannot target {', '.join(cfg.sm(a) for a in missing)} "
                        f"(it knows {', '.join(cfg.sm(a) for a in sorted(tc.nvcc_archs, key=cfg.arch_tuple))})")
    return tg, None


# --------------------------------------------------------------------------------------- key

def key_inputs(name: str, tc: Toolchain) -> dict:
    """Everything a build depends on besides its target arches."""
    s = cfg.spec(name)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cfg.source_files(tc.csrc, s)}
    return {
        "build_version": cfg.BUILD_VERSION,
        "name": name,
        "sources": files,
        "nvcc_flags": list(cfg.NVCC_COMMON),
        "cxx_flags": cfg.cxx_flags(Path(torch.__file__).parent),
        "torch": tc.torch_version,
        "torch_git": getattr(torch.version, "git_version", ""),
        "torch_cuda": tc.torch_cuda,
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)),
        "nvcc": tc.nvcc_text,
        "cuda_home": tc.cuda_home,
        "python": sys.implementation.cache_tag,
        "machine": platform.machine(),
    }


def key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _folder_prefix(inputs: dict) -> str:
    tv = re.sub(r"[^A-Za-z0-9.]+", "_", str(inputs["torch"]))
    return f"torch{tv}-{inputs['python']}-{key(inputs)}"


@dataclass
class Plan:
    name: str
    targets: list
    origin: str
    inputs: dict
    folder: Path

    @property
    def module_path(self) -> Path:
        return self.folder / f"{self.name}.so"


def plan(name: str, archs: list[str] | None = None) -> tuple[Plan | None, str | None]:
    """What compiling ``name`` here would build and where, or (None, why it cannot)."""
    s = cfg.spec(name)
    tc = toolchain()
    if tc.why:
        return None, tc.why
    if archs is None:
        archs, origin = wanted_archs()
    else:
        origin = "requested"
    tg, why = _arch_reasons(s, archs, origin, tc)
    if why:
        return None, why
    inputs = key_inputs(name, tc)
    folder = extensions_dir() / name / (_folder_prefix(inputs) + "-" + "_".join(cfg.sm(a) for a in tg))
    return Plan(name, tg, origin, inputs, folder), None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def cached(p: Plan) -> tuple[Path, dict] | None:
    """A finished build usable for ``p``: its own folder, or one with the same key whose arches
    include all of ``p``'s."""
    meta = _read_json(p.folder / "ok.json")
    if meta is not None and p.module_path.is_file():
        return p.folder, meta
    parent = p.folder.parent
    if parent.is_dir():
        for other in sorted(parent.glob(_folder_prefix(p.inputs) + "-*")):
            meta = _read_json(other / "ok.json")
            if meta and set(p.targets) <= set(meta.get("targets", ())) and (other / f"{p.name}.so").is_file():
                return other, meta
    return None


# --------------------------------------------------------------------------------------- lock

@contextlib.contextmanager
def file_lock(path: Path, waiting: Callable[[], None] | None = None):
    """An exclusive advisory lock on ``path`` (created if needed), held for the block. The OS
    releases it when the holder exits, killed or not. ``waiting`` is called once if another
    process holds it. Without fcntl (not POSIX) the block runs unlocked."""
    try:
        import fcntl
    except ImportError:
        yield
        return

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


# --------------------------------------------------------------------------------------- build

_CHILD = """
import json, sys
from torch.utils.cpp_extension import load
load(**json.loads(sys.argv[1]))
"""


def _child_env(tc: Toolchain) -> dict:
    env = dict(os.environ)
    env["CUDA_HOME"] = tc.cuda_home  # torch guesses it from nvcc's folder, which a wrapper misleads
    env["PATH"] = _search_path()
    return env


def _compile_child(p: Plan, log_path: Path, progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Runs torch.utils.cpp_extension.load in a child process; (exit code, output)."""
    tc = toolchain()
    s = cfg.spec(p.name)
    args = {
        "name": p.name,
        "sources": [str(x) for x in cfg.sources(tc.csrc, s)],
        "extra_cflags": cfg.cxx_flags(Path(torch.__file__).parent),
        "extra_cuda_cflags": cfg.nvcc_flags(p.targets),
        "build_directory": str(p.folder),
        "with_cuda": True,
        "verbose": True,
    }
    with open(log_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_child_env(tc))
        try:
            with open(log_path) as follow:
                pending = ""
                while True:
                    rc = proc.poll()
                    pending += follow.read()
                    *lines, pending = pending.split("\n")
                    if progress is not None:
                        for line in lines:
                            progress(line)
                    if rc is not None:
                        break
                    time.sleep(0.2)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return rc, log_path.read_text(errors="replace")


def _error_excerpt(text: str) -> str:
    """The first compiler error of a build log, else its last line."""
    for line in text.splitlines():
        if re.search(r"error[: ]|Error building|fatal", line) and "Traceback" not in line:
            return line.strip()[:300]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


Builder = Callable[[Plan, Path, Callable[[str], None] | None], tuple[int, str]]


def ensure(name: str, *, archs: list[str] | None = None, force: bool = False,
           progress: Callable[[str], None] | None = None, builder: Builder | None = None,
           announce: bool = True, compile: bool = True) -> tuple[Path | None, dict | str]:
    """Compile ``name`` unless a usable build is cached: (module path, build metadata, with
    "fresh": True when compiled by this call) or (None, why not). ``force`` compiles again even
    over a cached or failed build; ``compile=False`` only looks in the cache."""
    p, why = plan(name, archs)
    if p is None:
        return None, why
    hit = None if force else cached(p)
    if hit is not None:
        folder, meta = hit
        return folder / f"{name}.so", meta
    failed = _read_json(p.folder / "failed.json")
    if failed is not None and not force:
        return None, (f"an earlier compile of these sources with this toolchain failed ({failed.get('reason')}); "
                      f"log: {p.folder / 'build.log'}; `python -m ltx_kernels build --force` tries again")
    if not compile:
        return None, f"not compiled yet for {', '.join(cfg.sm(a) for a in p.targets)} (no build in {p.folder.parent})"
    try:
        p.folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return None, f"cannot create the compile cache {p.folder.parent} ({e}); set LTX_KERNELS_CACHE_DIR"
    lock = p.folder.with_name(p.folder.name + ".lock")
    with file_lock(lock, lambda: _say(f"waiting for another process compiling {name} ({lock})")):
        hit = None if force else cached(p)
        if hit is not None:  # another process built it while this one waited
            return hit[0] / f"{name}.so", hit[1]
        try:
            if p.folder.exists():  # a force rebuild, an earlier failure or an interrupted build
                shutil.rmtree(p.folder)
            p.folder.mkdir(parents=True)
        except OSError as e:
            return None, f"cannot write the compile cache {p.folder} ({e}); set LTX_KERNELS_CACHE_DIR"
        what = ", ".join(cfg.sm(a) for a in p.targets)
        if announce:
            _say(f"compiling the CUDA extension {name} for {what} (first use; takes a minute or two; "
                 f"cached in {p.folder})")
        t0 = time.time()
        try:
            rc, text = (builder or _compile_child)(p, p.folder / "build.log", progress)
        except OSError as e:  # the compiler process could not be started or its log written
            rc, text = None, f"could not run the compile: {e}"
        secs = time.time() - t0
        if rc != 0 or not p.module_path.is_file():
            if rc is None or rc < 0:  # not started, or killed by a signal: worth trying again next time
                reason = text if rc is None else f"the compiler was killed (signal {-rc})"
            else:
                reason = _error_excerpt(text)
                _write_json(p.folder / "failed.json", {"reason": reason, "exit_code": rc, "inputs": p.inputs,
                                                       "targets": p.targets})
            if announce:
                _say(f"compiling {name} failed after {secs:.0f} s: {reason} (log: {p.folder / 'build.log'})")
            return None, f"compiling {name} failed: {reason} (log: {p.folder / 'build.log'})"
        meta = {"name": name, "targets": p.targets, "seconds": round(secs, 1), "origin": p.origin,
                "when": time.strftime("%Y-%m-%d %H:%M:%S"), "inputs": p.inputs}
        _write_json(p.folder / "ok.json", meta)
        if announce:
            _say(f"{name} compiled in {secs:.0f} s")
        return p.module_path, dict(meta, fresh=True)


def builds(name: str) -> list[tuple[Path, dict]]:
    """Every finished build of ``name`` in the cache for this toolchain and these sources, whatever
    its arches, newest first."""
    tc = toolchain()
    if tc.why:
        return []
    prefix = _folder_prefix(key_inputs(name, tc))
    out = []
    for folder in (extensions_dir() / name).glob(prefix + "-*"):
        meta = _read_json(folder / "ok.json")
        if meta is not None and (folder / f"{name}.so").is_file():
            out.append((folder, meta))
    return sorted(out, key=lambda fm: fm[1].get("when", ""), reverse=True)


imported: dict[str, Path] = {}  # extensions this module imported: name -> .so


def import_module(name: str, path: Path):
    """Imports a built extension as ``ltx_kernels.<name>`` (so later ``import`` statements find it)."""
    full = f"ltx_kernels.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.spec_from_file_location(full, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[full] = mod
    imported[name] = Path(path)
    return mod
