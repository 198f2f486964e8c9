"""Per-GPU kernel configs: a JSON cache shared by every Triton kernel of the package.

A config is looked up by (device name, kernel, key), where the key is the
shape summary the kernel chooses (for the GEMM: N, K and an M bucket). Order:
the user cache (``$LTX_KERNELS_CACHE_DIR``, default ``~/.cache/ltx-kernels``),
then the configs shipped in ``ltx_kernels/configs/``, then the kernel's
heuristic. Nothing is tuned on the hot path unless ``LTX_KERNELS_AUTOTUNE=1``;
``python -m ltx_kernels.warmup`` tunes ahead of time.
"""
from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import torch

from ._dispatch import forget_choices, interpreter_on, log, resolve_backend_name, signature
from ._jit import file_lock
from .triton import next_pow2

_SHIPPED = Path(__file__).with_name("configs")
_lock = threading.Lock()
_memory: dict[str, dict] = {}
_warned: set = set()  # what _warn_once has said


def cache_dir() -> Path:
    """$LTX_KERNELS_CACHE_DIR, default ~/.cache/ltx-kernels (the compiled extensions live there too)."""
    from ._jit import cache_root

    return cache_root()


def device_name(device=None) -> str:
    if device is None:
        return _device_name(None, None)
    device = torch.device(device)
    return _device_name(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _device_name(kind, index) -> str:
    if torch.cuda.is_available() and kind in (None, "cuda"):
        return torch.cuda.get_device_name(index)
    return "cpu"


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") or "unknown"


def _load(path: Path) -> dict:
    """The records of a cache file: ``{entry_key: {"config": {...}, ...}}``. An unreadable file
    counts as empty, and records of another shape (a hand edit, a cache of another version) are
    left out, once with a warning: the kernels then take their heuristic configs."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, dict):
        _warn_once((path, "table"), "kernel config cache %s has no \"configs\" table: ignored (delete the file to "
                   "start over)", path)
        return {}
    good = {k: r for k, r in configs.items() if isinstance(k, str) and isinstance(r, dict)
            and isinstance(r.get("config"), dict)
            and all(isinstance(v, (int, float, str, bool)) for v in r["config"].values())}
    if len(good) < len(configs):
        _warn_once((path, "records"), "kernel config cache %s has %d malformed record(s): ignored (delete the file "
                   "to start over)", path, len(configs) - len(good))
    return good


def _warn_once(key, msg: str, *args) -> None:
    """log.warning(msg, *args), the first time for ``key`` in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)


def _table(dev: str) -> dict:
    with _lock:
        if dev not in _memory:
            table = dict(_load(_SHIPPED / f"{_file_stem(dev)}.json"))
            table.update(_load(cache_dir() / f"{_file_stem(dev)}.json"))
            _memory[dev] = table
        return _memory[dev]


def shipped_dir() -> Path:
    return _SHIPPED


def tables(dev: str) -> tuple[dict, dict]:
    """(shipped, user-cached) configs of device ``dev``, read from disk."""
    stem = _file_stem(dev)
    return _load(_SHIPPED / f"{stem}.json"), _load(cache_dir() / f"{stem}.json")


def known_devices() -> list[str]:
    """Device names with shipped or user-cached configs (read from the files' "device" field)."""
    names = []
    for folder in (_SHIPPED, cache_dir()):
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            name = data.get("device") if isinstance(data, dict) else None
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


def entry_key(kernel: str, key: Iterable) -> str:
    return kernel + "|" + ",".join(str(k) for k in key)


def lookup(kernel: str, key, device=None) -> dict | None:
    hit = _table(device_name(device)).get(entry_key(kernel, key))
    return dict(hit["config"]) if hit else None


def store(kernel: str, key, config: dict, ms: float, device=None, extra: dict | None = None) -> Path:
    dev = device_name(device)
    record = {"config": config, "ms": ms, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    if extra:
        record.update(extra)
    path = cache_dir() / f"{_file_stem(dev)}.json"
    table = _table(dev)  # (loaded before the record goes in, so a later first lookup cannot drop it)
    with _lock:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # read-modify-write under a lock: processes tuning at once would drop each other's records
            with file_lock(path.with_suffix(".lock")):
                on_disk = _load(path)
                on_disk[entry_key(kernel, key)] = record
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                with open(tmp, "w") as f:
                    json.dump({"device": dev, "configs": on_disk}, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
        except OSError as e:  # a read-only or full cache: this process still uses the record
            _warn_once((path, "unwritable"), "cannot write the kernel config cache %s (%s); tuned configs are kept "
                       "for this process only (LTX_KERNELS_CACHE_DIR moves the cache)", path, e)
        table[entry_key(kernel, key)] = record
        _choices.clear()
        forget_choices()
        global generation
        generation += 1
    return path


def m_bucket(m: int) -> int:
    """Cache key for a GEMM's M: the next power of two, 64 .. 32768."""
    return min(max(64, next_pow2(m)), 32768)


def autotune_enabled() -> bool:
    return os.environ.get("LTX_KERNELS_AUTOTUNE", "0") == "1"


def can_time(device) -> bool:
    """Whether candidates can be timed on ``device``: a CUDA device with compiled kernels (not CPU
    tensors, not the Triton interpreter)."""
    return device is not None and torch.device(device).type == "cuda" and not interpreter_on()


def bench_ms(fn: Callable[[], None], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of fn in ms (do_bench: L2 flushed before every call)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def tune(kernel: str, key, candidates: list[dict], run: Callable[[dict], Callable[[], None]],
         device=None, verbose: bool = False) -> tuple[dict, float]:
    """Time every candidate (``run(cfg)`` returns a no-arg launcher) and store the fastest."""
    best, best_ms = None, float("inf")
    for cfg in candidates:
        try:
            fn = run(cfg)
            fn()
            ms = bench_ms(fn)
        except Exception as e:  # out of resources, etc.: skip the config
            if verbose:
                print(f"  {kernel} {key} {cfg}: failed ({type(e).__name__})")
            continue
        if verbose:
            print(f"  {kernel} {key} {cfg}: {ms * 1e3:.1f} us")
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"no config of {kernel} ran for key {key}")
    store(kernel, key, best, best_ms, device)
    return best, best_ms


def choose(kernel: str, key, heuristic: dict, candidates: Callable[[], list[dict]] | None = None,
           run: Callable[[dict], Callable[[], None]] | None = None, device=None) -> dict:
    """The config to launch with: cached/shipped, else tuned now (LTX_KERNELS_AUTOTUNE=1), else heuristic.

    Answers are memoised per (kernel, key, device) until the next ``store``: this runs on every call."""
    memo_key = (kernel, key if isinstance(key, tuple) else tuple(key), device)
    cfg = _choices.get(memo_key)
    if cfg is not None:
        return cfg
    cfg = lookup(kernel, key, device)
    if cfg is not None:
        # the keys every config of this kernel has (others, like the GEMM's PERSISTENT, are optional):
        # a record without one is of another version of the kernel
        required = set(heuristic).intersection(*(candidates() if candidates is not None else ()))
        if not required <= set(cfg):
            _warn_once(("stale",) + memo_key, "the kernel config cache (or the shipped configs) of %s: %s config "
                       "%s for %s lacks %s (another version's); using the heuristic config (python -m "
                       "ltx_kernels.warmup tunes it again)", device_name(device), kernel, cfg, key,
                       sorted(required - set(cfg)))
            cfg = None
    if cfg is None:
        cfg = dict(heuristic)
        if (autotune_enabled() and candidates is not None and run is not None and can_time(device)
                and not torch.compiler.is_compiling()):
            log.debug("tuning %s %s", kernel, key)
            try:
                cfg, _ = tune(kernel, key, candidates(), run, device)
            except RuntimeError as e:  # no candidate ran: the heuristic's config (which may say why)
                log.warning("LTX_KERNELS_AUTOTUNE: %s; using the heuristic config", e)
    _choices[memo_key] = cfg
    return cfg


_choices: dict = {}
# Bumped by every ``store``: the wrappers' per-signature launch plans include it in their keys, so
# a config tuned later in the process replaces the one a plan was made with.
generation = 0


def plan_key(*parts, backend: str):
    """The key of a call's launch plan (``_dispatch.Plans``), one for the public wrapper and the
    op torch.library runs: the arguments' signature, the resolved backend and ``generation``.
    None while torch.compile traces."""
    return signature((*parts, resolve_backend_name(backend), generation))
