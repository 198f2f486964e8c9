"""Run-time backend choice, in the style of xformers' dispatcher.

Every public op owns an :class:`Op`. Each backend registered on it answers
``reasons(*args)``: the list of reasons it cannot take these inputs (empty
means it can). ``backend="auto"`` takes the first backend, in priority order,
with no reasons; an op may reorder that priority per input (``Op.preference``,
e.g. a measured faster backend for a shape). Naming a backend that has reasons
raises :class:`BackendUnavailable` listing them.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable

import torch

BACKENDS = ("torch", "triton", "cuda")
log = logging.getLogger("ltx_kernels")
if os.environ.get("LTX_KERNELS_LOG", "").lower() == "debug":
    # a handler of this logger's own: the application's logging setup is left alone
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[ltx_kernels] %(message)s"))
    log.addHandler(_handler)
    log.propagate = False
    log.setLevel(logging.DEBUG)


class BackendUnavailable(ValueError):
    """The requested backend cannot run these inputs; the message says why."""


@dataclass
class Backend:
    name: str
    fn: Callable
    reasons: Callable[..., list]


_ops: list = []  # every Op, so that a new tuning record can reset their memoised choices


def forget_choices() -> None:
    """Called by ``tuning.store``: a preference may read tuned results, so choices made before the
    new record are made again."""
    for op in _ops:
        op._memo = Memo()


class Op:
    def __init__(self, name: str):
        self.name = name
        self.backends: dict[str, Backend] = {}
        # "auto" tries these in order: compiled extension, Triton, torch.
        self.priority = ("cuda", "triton", "torch")
        # preference(*args) -> None, or (order, why): another order for these inputs
        self.preference: Callable[..., tuple | None] | None = None
        self._memo = Memo()
        _ops.append(self)

    def register(self, name: str, reasons: Callable[..., list] | None = None):
        if name not in BACKENDS:
            raise ValueError(f"unknown backend {name!r}")

        def deco(fn):
            # the torch backend runs the references, differentiable torch code; the ops record no
            # autograd history whichever backend runs them
            run = torch.no_grad()(fn) if name == "torch" else fn
            self.backends[name] = Backend(name, run, reasons or (lambda *a, **k: []))
            return fn

        return deco

    def why_not(self, *args, **kwargs) -> dict[str, list]:
        out = {}
        for name in BACKENDS:
            b = self.backends.get(name)
            out[name] = ["not implemented for this op"] if b is None else list(b.reasons(*args, **kwargs))
        return out

    def select(self, backend: str, *args, **kwargs) -> Backend:
        backend = resolve_backend_name(backend)
        if backend == "auto":
            skipped = {}
            pref = self.preference(*args, **kwargs) if self.preference else None
            order, why = pref if pref else (self.priority, None)
            if why:
                log.debug("%s: order %s: %s", self.name, ", ".join(order), why)
            for name in order:
                b = self.backends.get(name)
                if b is None:
                    continue
                r = b.reasons(*args, **kwargs)
                if not r:
                    if skipped:
                        log.debug("%s: %s (skipped %s)", self.name, name,
                                  "; ".join(f"{k}: {', '.join(v)}" for k, v in skipped.items()))
                    else:
                        log.debug("%s: %s", self.name, name)
                    return b
                skipped[name] = r
            raise BackendUnavailable(f"{self.name}: no backend can run these inputs: {_fmt(skipped)}")
        b = self.backends.get(backend)
        if b is None:
            raise BackendUnavailable(f"{self.name}: backend {backend!r} is not implemented for this op "
                                     f"(have: {', '.join(self.backends)})")
        r = b.reasons(*args, **kwargs)
        if r:
            raise BackendUnavailable(f"{self.name}: backend {backend!r} cannot run these inputs: {'; '.join(r)}")
        log.debug("%s: %s (requested)", self.name, backend)
        return b

    def __call__(self, backend: str, *args):
        # The choice depends only on the arguments' signature (shapes, strides, dtypes, devices,
        # flags) and the environment, so it is memoised per signature: select() walks every
        # backend's reasons and costs tens of microseconds.
        sig = signature(args)
        key = None if sig is None else (resolve_backend_name(backend), sig)
        b = self._memo.get(key) or self._memo.put(key, self.select(backend, *args))
        index = other_cuda_device(args)
        if index is None:
            return b.fn(*args)
        with torch.cuda.device(index):
            return b.fn(*args)


def other_cuda_device(args) -> int | None:
    """The index of the first tensor's CUDA device when it is not the current device, else None.
    Triton compiles, loads, times (events, the allocator) and launches on the current device, not on
    its arguments' (the CUDA extensions guard the device themselves): a call on tensors of another
    device runs with that device made current."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type != "cuda" or a.device.index == torch.cuda.current_device():
                return None
            return a.device.index
    return None


def signature(args) -> tuple:
    """What a backend's reasons and a wrapper's checks can depend on, hashable (the base pointer's
    16-byte alignment too: TMA paths need it). None while torch.compile traces (fake tensors have
    no data pointer; the memos are an eager-mode shortcut)."""
    if torch.compiler.is_compiling():
        return None
    # This runs on every eager call. A list comprehension, not a generator (0.5 us less at six
    # tensors); the exact-type tests first, because isinstance(x, torch.Tensor) goes through the
    # tensor metaclass's instance check, about 0.2 us for each None, string or number.
    return tuple([(a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15)
                  if type(a) is _TENSOR or (type(a) not in _PLAIN and isinstance(a, _TENSOR)) else a for a in args])


_TENSOR = torch.Tensor
_PLAIN = frozenset((type(None), bool, int, float, str))


class Memo:
    """A bounded dict for per-call shortcuts keyed by :func:`signature`: a ``None`` key (while
    torch.compile traces) is never stored; past 4096 entries it starts over."""

    def __init__(self):
        self._seen: dict = {}

    def get(self, key):
        try:
            return None if key is None else self._seen.get(key)
        except TypeError:  # an unhashable argument (a list for a tensor): the checks will say what
            return None

    def put(self, key, value=True):
        if key is None:
            return value
        if len(self._seen) > 4096:
            self._seen.clear()
        try:
            self._seen[key] = value
        except TypeError:
            pass
        return value


class Plans:
    """Per-signature launch plans of a public wrapper, the eager fast path: once a backend has run
    a call on the caller's own tensors, it may ``offer`` a plan, a callable that redoes the same
    launch for new tensors of the same signature (output allocation and a direct launch of the
    compiled kernel with the config already chosen). Validation, backend choice, config lookup
    and Triton's argument binding depend on the signature only and cost tens of microseconds of
    host time a call, more than many of these kernels take on the GPU. Keys should include the
    resolved backend and ``tuning.generation`` (a config tuned later replaces the planned one)."""

    def __init__(self):
        self._memo = Memo()
        self._slot = threading.local()

    def get(self, key):
        return self._memo.get(key)

    def offer(self, plan) -> None:
        """Called by a backend during ``record``."""
        self._slot.plan = plan

    def record(self, key, fn, *args):
        """fn(*args) (the regular path); keeps the plan a backend offered meanwhile under key
        (None: keep nothing, e.g. when the wrapper had to copy an input)."""
        self._slot.plan = None
        out = fn(*args)
        plan, self._slot.plan = self._slot.plan, None
        if plan is not None:
            self._memo.put(key, plan)
        return out


def _fmt(d):
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in d.items())


# Every eager call reads LTX_KERNELS_BACKEND. os.environ.get takes about 1 us when the variable is
# unset (os._Environ raises and catches a KeyError); the bytes dict behind os.environ, which its
# setters update, answers in tens of nanoseconds. Anything else in os.environ's place (a mock, or
# Windows, which keys that dict differently) is read the usual way.
def _backend_env() -> str:
    env = os.environ
    if os.name != "posix" or type(env) is not os._Environ:
        return env.get("LTX_KERNELS_BACKEND", "")
    value = env._data.get(b"LTX_KERNELS_BACKEND")
    return "" if value is None else os.fsdecode(value)


def resolve_backend_name(backend: str | None) -> str:
    name = "backend"
    if backend is None or backend == "auto":
        backend = _backend_env() or "auto"
        name = "LTX_KERNELS_BACKEND"
    if backend not in ("auto",) + BACKENDS:
        raise ValueError(f"{name} must be one of 'auto', 'torch', 'triton', 'cuda'; got {backend!r}")
    return backend


# ---------------------------------------------------------------------------------------------
# Shared availability checks. Each returns a list of reasons (empty: available).

def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


@functools.lru_cache(maxsize=None)
def _triton_import_error() -> str | None:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the install
        return f"triton not importable ({type(e).__name__}: {e})"
    return None


def triton_reasons(*tensors: torch.Tensor, min_arch: tuple[int, int] = (8, 0)) -> list:
    err = _triton_import_error()
    if err:
        return [err]
    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        return [f"tensors on different devices: {sorted(map(str, devs))}"]
    dev = next(iter(devs)) if devs else torch.device("cpu")
    if interpreter_on():
        return []
    return list(_device_reasons(dev.type, dev.index, min_arch))


@functools.lru_cache(maxsize=None)
def _device_reasons(kind: str, index, min_arch) -> tuple:
    if kind == "cpu":
        return ("CPU tensors need TRITON_INTERPRET=1",)
    if kind != "cuda":
        return (f"device {kind} is not supported by the Triton kernels",)
    if torch.version.hip is not None:
        return ("ROCm is not validated for these kernels",)
    cap = torch.cuda.get_device_capability(index)
    if cap < min_arch:
        return (f"needs sm_{min_arch[0]}{min_arch[1]}+, device is sm_{cap[0]}{cap[1]}",)
    return ()


def torch_reasons(*tensors: torch.Tensor) -> list:
    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        return [f"tensors on different devices: {sorted(map(str, devs))}"]
    return []


def run_planned(plans: Plans, key, plan_args: tuple, impl, *args):
    """The body of an op as torch.library registers it, for ops with an eager plan cache: the plan
    of the arguments' signature when a call of that signature has recorded one, else ``impl``
    (recording the plan a backend offers). Compiled graphs and direct ``torch.ops`` calls run
    this, so they skip the backend path (choice, row maps, config lookup, Triton's argument
    binding: tens of microseconds a call) as the eager wrappers do. ``key``: the call's
    ``tuning.plan_key``, as the public wrapper computes it; ``plan_args``: what the wrapper passes
    to its plan."""
    plan = plans.get(key)
    if plan is not None:
        return plan(*plan_args)
    return plans.record(key, impl, *args)


def call(custom_op, impl, *args):
    """Eager calls go straight to the implementation (the torch.library dispatcher costs tens of
    microseconds a call); under torch.compile / export the registered op is traced instead."""
    if torch.compiler.is_compiling():
        return custom_op(*args)
    return impl(*args)
