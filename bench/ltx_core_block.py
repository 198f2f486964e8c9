#!/usr/bin/env python3
"""LTX-2's video transformer, run by ltx-core unchanged on this package and on LTX-2's own
ltx-kernels: accuracy and speed of bf16, FP8 and FP6 blocks at real sizes.

Usage
-----
    python bench/ltx_core_block.py --ltx2 /tmp/ltx2 --upstream-path "$(bash tools/upstream/build_upstream.sh)" \\
        --json out.json [--tokens 8192,32768] [--blocks 2] [--variants bf16,fp8,fp6] \\
        [--modes eager,graph,full,compile,captured] [--rounds 40] [--iters 1] [--profile] [--budget-s 540] \\
        [--ours-sm90-tiles 256x128x2,192x128x1] [--split-processes]
    python bench/ltx_core_block.py --ltx2 /work/up --smoke [--time] # CPU, TRITON_INTERPRET=1, ~1 min
    python bench/ltx_core_block.py --report out.json                # the tables of an earlier run

``--ltx2`` is LTX-2's monorepo root (the folder holding ``packages/ltx-core``). ltx-core is
imported from there; this package from the repository; LTX-2's ltx-kernels from
``--upstream-path`` (the folder ``tools/upstream/build_upstream.sh`` prints), skipped with a
note when absent.

The model
---------
``LTXVideoOnlyModelConfigurator`` from checkpoint metadata of the LTX-2.3 22B transformer (hidden
4096 = 32 heads x 128, FFN 16384, split RoPE in float64, gated attention, cross-attention AdaLN,
caption projection in the text encoder) with ``--blocks`` blocks. Seeded random bf16 weights are
written to a real safetensors checkpoint (``model.diffusion_model.`` keys, config in the metadata)
and every model is built from it the way ltx-pipelines builds the transformer:
``SingleGPUModelBuilder`` with ``LTXV_MODEL_COMFY_RENAMING_MAP``; for fp8/fp6 the SDOps and
ModuleOps of ltx-core's ``build_fp8_policy()`` / ``build_fp6_policy()`` are chained on (the
weights are quantized by ltx-core at load, as from a bf16 checkpoint) with the video-only variant
of the policy's configurator; for the compiled modes ``build_compile_transformer_op`` is appended
and the keys are renamed with ``modify_sd_ops_for_compilation``, as ltx-pipelines does.
Inputs come from ltx-core's own latent tools: ``VideoLatentTools`` + ``VideoLatentPatchifier``
(patch 1) over a latent grid of T tokens (8 x 32 x 32 for 8192, 32 x 32 x 32 for 32768, i.e.
1024 x 1024 pixels), seeded random latent, sigma 0.7 with per-token timesteps
(denoise_mask * sigma, as ltx-pipelines' ``modality_from_latent_state``), a random text context of
``--context-tokens`` (1024, the Gemma tokenizer's padded length) at 4096, no context mask.

Accuracy (per variant, package, T; eager)
-----------------------------------------
Relative error ||a - b|| / ||b|| (Frobenius, fp32 sums) of the model output and of the outputs of
each block's attn1 (self-attention), attn2 (text cross-attention) and ff, captured by forward
hooks, against the same model built in fp32 (no TF32) and in bf16 -- same checkpoint, same inputs.
Tables show the worst block; the JSON has every block. ``vs_eager`` in the timing records is the
relative error of each mode's block-stack output against the eager one of the same model.

Time (per variant, package, T, mode)
------------------------------------
Median ms of one pass through the block stack (``LTXModel._process_transformer_blocks`` on
arguments prepared once by the model's own ``video_args_preprocessor``), by CUDA events:
  eager     the block loop as is;
  graph     the block loop inside ltx-core's ``CudaGraphRunner`` (cudagraph_capture.py: its own
            warm-up, one CUDA graph per shape, replay);
  compile   ltx-core's ``compile_transformer`` (CompilationConfig() defaults: each block through
            torch.compile, dynamic sequence dimension), called under its config patches;
  captured  ``compile_transformer_captured`` (CompilationConfig(capture=True)): compiled blocks and
            one CUDA graph over the loop (its ``CudaGraphRunner`` again);
  full      eager ``model(video, None, None)`` including RoPE/timestep preparation and the output
            projection (package-independent work, for scale).
The first call of each (entry, mode, T) -- torch.compile's compile, the graph capture -- is timed
separately (``setup_s``). Then ``--warmup`` calls, then ``--rounds`` rounds; each round runs every
entry (bf16 = ltx-core's pure PyTorch path, fp8/fp6 x package) for ``--iters`` timed calls, the
entry order rotating from round to round, so both packages see the same clock (the GPU follows a
power limit; only same-run ratios mean anything). Reported: median over all calls, the per-round
medians, and ours/upstream as the median of per-round ratios with its distribution-free 95 %
interval (order statistics; ``ci95``). Rounds are many and short by default (40 rounds of one
call: every call next to the other package's), which cancels drifts slower than one call: on an
H100 the eager intervals came out 1.1-2.4 % wide, where 8 rounds of 5 calls had given 4.7-13 % on
the H200 (with 8 rounds the interval is the rounds' whole range). While each entry's timed calls run,
NVML's SM clock and board power are sampled every 5 ms (``tools/nvml_clock.py``; per-round
medians in ``round_mhz`` / ``round_watts``, and ours/upstream's clock ratio beside the time
ratio): at the power limit a package whose kernels draw more power per FLOP gets a lower clock
for all of its forward, the shared attention kernel included, and this shows it.

Two packages named ltx_kernels in one process
---------------------------------------------
Chosen: in-process. Each package is imported once, together with its own copy of ltx-core
(``ltx_kernels*``, ``ltx_core*`` and upstream's top-level extensions ``ops_cpp``, ``blockwise_cpp``,
``all2all_cpp`` leave ``sys.modules`` and ``sys.path`` is switched before the second import); before
an entry runs, the module set of its package is put back into ``sys.modules``, because both
packages resolve some imports at call time. Why this is sound: the op registrations do not meet --
upstream registers ``q8_kernels_ops::*``, ``blockwise::*`` and ``ltx_kernels::send_recv_heads`` /
``gather_heads``; this package ``ltx_kernels::<op>`` with other names (``all2all_*`` for its
All2All); a clash would fail loudly at the second import, and the script prints and records both
sets and their intersection (empty). ltx-core's transformer path registers no op at import (only
its VAE modules do, never imported here); its models and TransformerArgs classes are per copy,
so CUDA graphs of one package never serve the other. The pybind modules do not collide either:
upstream binds one class (``All2All``), this package only functions. In-process lets every round
visit every entry on the same clock, a few calls each. ltx-core's compiled modes are the
exception: Dynamo resolves some of what it traces by module name, so the second package's trace
finds the first one's modules (upstream's fails on this package's ``triton_ops``,
``bench/results/2026-12-04-h200-ltx-core-block-eager-compile/block_compile_one_process.md``); they
run with ``--split-processes``, whose turns keep the rounds side by side.

``--profile``: a torch.profiler summary at ``--profile-tokens`` (a list; default: the largest T) per
(variant, package), eager: the top kernels by GPU time per forward and the host (CPU) time per
forward, printed and stored.

``--ours-sm90-lib PATH`` (development): this package's SM90 GEMM launches go to a kernel library
built by ``LIB=1 tools/sm90_build_standalone.sh`` (a timing variant of the kernel) instead of the
extension, so a variant is timed in the real block beside upstream, clock included; one process
per variant, ratios within each (``Sm90Hook``).

``--ours-sm90-tiles 256x128x2,192x128x1`` (development): beside this package as it is, entries
``ours@256x128x2``, ... run the same models with every SM90 GEMM launch forced to that tile
(``Sm90Hook.tile``, set before each entry runs; K slices as the host picks them), in the same
rotating rounds: which tile makes the whole forward fastest, clock included, measured the way the
packages are compared. (``LTX_KERNELS_SM90_TILE`` forces one tile for a whole process.)

``--split-processes``: one process per package (``--serve`` workers of this script), run at once,
with every timing setup, timed round and profile of either process in a turn of its own handed out
by this one: round r of each package runs next to round r of the other, the first alternating.
ltx-core's compiled modes need it (the comment above ``coordinate`` says why); bf16 runs in every
process, and its ratio between them (``process_control``) is the protocol's floor.

``--smoke``: hidden 256 (2 heads x 128), FFN 1024, 2 blocks, T = 256, 32 context tokens, CPU,
this package under TRITON_INTERPRET=1, eager accuracy only (``--time`` adds the timing code on
the CPU clock for the eager, full and compile modes: a path check). On a machine without CUDA,
``Tensor.cuda`` is made the identity for the run, since ltx-core's policy moves each weight to
the GPU to quantize it.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
# Modules that exist once per package: the two ltx_kernels, the ltx-core copy bound to each, and
# upstream's top-level extensions.
OWNED_PREFIXES = ("ltx_kernels", "ltx_core", "ops_cpp", "blockwise_cpp", "all2all_cpp")
PROJECT_OP_NAMESPACES = ("ltx_kernels", "q8_kernels_ops", "blockwise", "ltx_kernels_nvfp4", "ltx_core")
QUANT_VARIANTS = ("fp8", "fp6")
ALL_MODES = ("eager", "graph", "full", "compile", "captured")
FPS = 24.0
SIGMA = 0.7
CKPT_PREFIX = "model.diffusion_model."


# ---------------------------------------------------------------------------------------------
# The model's configuration: LTX-2.3 22B checkpoint metadata, with the block count and (for the
# smoke run) the width made small.

def transformer_config(hidden: int, blocks: int) -> dict:
    heads = hidden // 128
    return {
        # checked by ltx-core's configurator (check_config_value)
        "dropout": 0.0, "attention_bias": True, "num_vector_embeds": None,
        "activation_fn": "gelu-approximate", "num_embeds_ada_norm": 1000,
        "use_linear_projection": False, "only_cross_attention": False, "cross_attention_norm": True,
        "double_self_attention": False, "upcast_attention": False, "standardization_norm": "rms_norm",
        "norm_elementwise_affine": False, "qk_norm": "rms_norm", "positional_embedding_type": "rope",
        "use_audio_video_cross_attention": True, "share_ff": False, "av_cross_ada_norm": True,
        "use_middle_indices_grid": True,
        # dimensions
        "num_layers": blocks, "num_attention_heads": heads, "attention_head_dim": 128,
        "in_channels": 128, "out_channels": 128, "cross_attention_dim": hidden,
        "audio_num_attention_heads": heads, "audio_attention_head_dim": 64,
        "audio_cross_attention_dim": 2048,
        # LTX-2.3
        "norm_eps": 1e-06, "positional_embedding_theta": 10000.0,
        "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
        "rope_type": "split", "frequencies_precision": "float64", "apply_gated_attention": True,
        "cross_attention_adaln": True, "caption_proj_before_connector": True,
    }


def latent_grid(tokens: int) -> tuple[int, int, int]:
    """(frames, height, width) of the latent: 32 x 32 (1024 x 1024 pixels) per frame when T allows."""
    if tokens % 1024 == 0:
        return tokens // 1024, 32, 32
    side = math.isqrt(tokens)
    if side * side == tokens:
        return 1, side, side
    raise SystemExit(f"--tokens {tokens}: use a multiple of 1024 or a square")


# ---------------------------------------------------------------------------------------------
# Two packages named ltx_kernels in one process.

def _owned(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OWNED_PREFIXES)


def _project_ops() -> set[str]:
    get = getattr(torch._C, "_dispatch_get_all_op_names", None)
    names = get() if get else []
    return {n for n in names if n.split("::")[0] in PROJECT_OP_NAMESPACES}


class Packages:
    """Each package with its own ltx-core copy, swapped in and out of sys.modules."""

    def __init__(self, roots: dict[str, Path], ltx_core_src: Path):
        self.roots = roots
        self.core_src = ltx_core_src
        self.saved: dict[str, dict] = {}
        self.active: str | None = None
        self.ops: dict[str, list[str]] = {}
        self.ltx_core: dict[str, types.SimpleNamespace] = {}

    def activate(self, name: str) -> None:
        if name == self.active:
            return
        if self.active is not None:
            self.saved[self.active] = {k: m for k, m in sys.modules.items() if _owned(k)}
        for k in [k for k in sys.modules if _owned(k)]:
            del sys.modules[k]
        # first on sys.path wins, whatever else provides an ltx_kernels further down
        managed = {str(p) for p in (*self.roots.values(), self.core_src)}
        sys.path[:] = [str(self.roots[name]), str(self.core_src)] + [p for p in sys.path if p not in managed]
        importlib.invalidate_caches()
        sys.modules.update(self.saved.get(name, {}))
        self.active = name

    def load(self, name: str) -> types.SimpleNamespace:
        before = _project_ops()
        self.activate(name)
        lc = import_ltx_core()
        where = Path(lc.ltx_kernels.__file__).resolve()
        if not where.is_relative_to(self.roots[name].resolve()):
            raise SystemExit(f"{name}: imported ltx_kernels from {where}, expected under {self.roots[name]}")
        self.ops[name] = sorted(_project_ops() - before)
        self.ltx_core[name] = lc
        return lc


def _import_tool(name: str):
    """A module of tools/ (measurement helpers shared with the GEMM tools)."""
    tools = str(Path(__file__).resolve().parents[1] / "tools")
    if tools not in sys.path:
        sys.path.append(tools)
    return importlib.import_module(name)


class Sm90Hook:
    """Development only: wraps this package's SM90 extension module where its loader hands it out
    (``_ext.load``, which every GEMM call and launch plan goes through), for two experiments in the
    real block, beside upstream and on the same clock:

    - ``tile``: when set, every launch runs that (block_m, block_n, cluster) instead of the host's
      pick (K slices as the host chose them). The entries of ``--ours-sm90-tiles`` set it before
      they run, so several tile choices share one process, one model and rotating rounds.
    - ``library`` (``--ours-sm90-lib``): launches go to a kernel library built by ``LIB=1
      tools/sm90_build_standalone.sh`` (a timing variant of the kernel, through its C entry point,
      bound by tools/gemm_protocols.py's ``lib_gemm``). Calls the library cannot take (K slices,
      strided operands, scales not M-major, a non-fp32 bias) stay on the extension."""

    def __init__(self, ltx_kernels, library: Path | None = None):
        self.tile: tuple | None = None
        self._launch = _import_tool("gemm_protocols").lib_gemm(str(library)) if library else None
        ext = ltx_kernels._ext
        real_load = ext.load
        shims = {}
        hook = self

        class Shim:
            def __init__(self, mod):
                self.mod = mod

            def __getattr__(self, name):
                return getattr(self.mod, name)

            def fp8_gemm_nt(self, *args):
                return hook.fp8_gemm_nt(self.mod, *args)

        def load(name):
            mod, why = real_load(name)
            if name != "_C_gemm_sm90" or mod is None:
                return mod, why
            if id(mod) not in shims:  # one shim per module (load runs on every GEMM call)
                shims[id(mod)] = Shim(mod)
            return shims[id(mod)], why

        ext.load = load

    def fp8_gemm_nt(self, mod, a, sa, b, sb, bias, d, bm, bn, cl, splits):
        if self.tile is not None:
            bm, bn, cl = self.tile
        k = a.shape[1]
        if self._launch is None or (splits != 1 or a.stride(0) != k or b.stride(0) != k or d.stride(1) != 1
                                    or sa.stride(0) != 1 or (bias is not None and bias.dtype != torch.float32)):
            return mod.fp8_gemm_nt(a, sa, b, sb, bias, d, bm, bn, cl, splits)
        self._launch(a, sa, b, sb, bias, d, (bm, bn, cl))


def parse_tiles(text: str) -> list[tuple]:
    """'256x128x2,192x128x1' -> [(256, 128, 2), (192, 128, 1)]."""
    tiles = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"--ours-sm90-tiles: {item!r} is not BMxBNxCLUSTER (e.g. 256x128x2)")
        tiles.append(tuple(int(p) for p in parts))
    return tiles


def import_ltx_core() -> types.SimpleNamespace:
    """The ltx-core (and ltx_kernels, through ltx-core's blockwise policies) of the active package."""
    import ltx_core.components.patchifiers as patchifiers
    import ltx_core.guidance.perturbations as perturbations
    import ltx_core.loader as loader
    import ltx_core.loader.attention_ops as attention_ops
    import ltx_core.model.transformer as transformer
    import ltx_core.model.transformer.attention as attention
    import ltx_core.model.transformer.compiling as compiling
    import ltx_core.model.transformer.cudagraph_capture as cudagraph_capture
    import ltx_core.model.transformer.model_configurator as model_configurator
    import ltx_core.quantization.blockwise as blockwise
    import ltx_core.tools as tools
    import ltx_core.types as ltx_types

    policies = {"fp8": blockwise.build_fp8_policy(), "fp6": blockwise.build_fp6_policy()}
    impl = importlib.import_module("ltx_core.quantization.blockwise._impl")
    import ltx_kernels

    return types.SimpleNamespace(
        ltx_kernels=ltx_kernels, attention=attention, attention_ops=attention_ops, compiling=compiling,
        cudagraph_capture=cudagraph_capture,
        policies=policies,
        video_only={impl.BlockwiseFP8LTXModelConfigurator: impl.BlockwiseFP8LTXVideoOnlyModelConfigurator,
                    impl.BlockwiseFP6LTXModelConfigurator: impl.BlockwiseFP6LTXVideoOnlyModelConfigurator},
        LTXVideoOnlyModelConfigurator=transformer.LTXVideoOnlyModelConfigurator, Modality=transformer.Modality,
        LTXV_MODEL_COMFY_RENAMING_MAP=model_configurator.LTXV_MODEL_COMFY_RENAMING_MAP,
        SingleGPUModelBuilder=loader.SingleGPUModelBuilder, DummyRegistry=loader.DummyRegistry, SDOps=loader.SDOps,
        BatchedPerturbationConfig=perturbations.BatchedPerturbationConfig,
        VideoLatentTools=tools.VideoLatentTools, VideoLatentPatchifier=patchifiers.VideoLatentPatchifier,
        VideoLatentShape=ltx_types.VideoLatentShape, VideoPixelShape=ltx_types.VideoPixelShape,
    )


# ---------------------------------------------------------------------------------------------
# Checkpoint and models, through ltx-core's loader.

def _init_weight(name: str, shape: torch.Size, gen: torch.Generator, device) -> torch.Tensor:
    r = torch.randn(shape, generator=gen, device=device)
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return 1 + 0.1 * r
    if "scale_shift_table" in name:
        return 0.1 * r
    if name.endswith(".bias"):
        return 0.02 * r
    if len(shape) == 2:
        return r / math.sqrt(shape[1])
    return 0.02 * r


def write_checkpoint(lc, config: dict, path: Path, seed: int, device) -> None:
    import safetensors.torch

    metadata = {"config": {"transformer": config}}
    with torch.device("meta"):
        shell = lc.LTXVideoOnlyModelConfigurator.from_metadata(metadata)
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {CKPT_PREFIX + name: _init_weight(name, t.shape, gen, device).to(torch.bfloat16).cpu()
               for name, t in shell.state_dict().items()}
    safetensors.torch.save_file(tensors, str(path), metadata={"config": json.dumps(metadata["config"]),
                                                             "model_version": "2.3.0"})


def build_model(lc, ckpt: Path, variant: str, device, blocks: int, compile_config=None):
    """As ltx-pipelines' DiffusionStage: quantization ops chained on the renaming map, then the
    compile op. Quantized models load the bf16 checkpoint as is (no dtype cast)."""
    configurator, sd_ops, module_ops = lc.LTXVideoOnlyModelConfigurator, lc.LTXV_MODEL_COMFY_RENAMING_MAP, ()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(variant)
    if variant == "fp32":  # torch's SDPA (its fp32 kernel), whatever AUTOMATIC would pick for bf16 (FA3 has no fp32)
        module_ops = (lc.attention_ops.set_attention_module_op(lc.attention.AttentionFunction.PYTORCH),)
    if variant in QUANT_VARIANTS:
        policy = lc.policies[variant]
        configurator = lc.video_only[policy.model_configurator]
        sd_ops = lc.SDOps(name=f"sd_ops_chain_{sd_ops.name}+{policy.sd_ops.name}",
                          mapping=(*sd_ops.mapping, *policy.sd_ops.mapping))
        module_ops = (*module_ops, *policy.module_ops)
    if compile_config is not None:
        sd_ops = lc.compiling.modify_sd_ops_for_compilation(sd_ops, blocks)
        module_ops = (*module_ops, lc.compiling.build_compile_transformer_op(compile_config))
    builder = lc.SingleGPUModelBuilder(model_class_configurator=configurator, model_path=str(ckpt),
                                       model_sd_ops=sd_ops, module_ops=module_ops, registry=lc.DummyRegistry())
    model = builder.build(device=device, dtype=dtype).eval()
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise RuntimeError(f"{variant}: parameters left on the meta device: {left[:5]}")
    return model


def make_inputs(lc, tokens: int, context_tokens: int, context_dim: int, device, seed: int) -> dict:
    f, h, w = latent_grid(tokens)
    pixels = lc.VideoPixelShape(batch=1, frames=(f - 1) * 8 + 1, height=h * 32, width=w * 32, fps=FPS)
    shape = lc.VideoLatentShape.from_pixel_shape(pixels, latent_channels=128)
    tools = lc.VideoLatentTools(lc.VideoLatentPatchifier(patch_size=1), shape, FPS)
    gen = torch.Generator().manual_seed(seed + tokens)
    latent = torch.randn(shape.to_torch_shape(), generator=gen).to(device, torch.bfloat16)
    state = tools.create_initial_state(device, torch.bfloat16, initial_latent=latent)
    if state.latent.shape[1] != tokens:
        raise RuntimeError(f"latent tools made {state.latent.shape[1]} tokens, wanted {tokens}")
    sigma = torch.tensor([SIGMA], device=device)
    context = torch.randn(1, context_tokens, context_dim, generator=gen).to(device, torch.bfloat16)
    return {"latent": state.latent, "sigma": sigma, "timesteps": state.denoise_mask * sigma,
            "positions": state.positions, "context": context, "attention_mask": state.attention_mask}


def modality(lc, inputs: dict, dtype):
    return lc.Modality(latent=inputs["latent"].to(dtype), sigma=inputs["sigma"], timesteps=inputs["timesteps"],
                       positions=inputs["positions"], context=inputs["context"].to(dtype), enabled=True,
                       context_mask=None, attention_mask=inputs["attention_mask"])


def prepare(lc, model, inputs: dict, dtype):
    args = model.video_args_preprocessor.prepare(modality(lc, inputs, dtype), None)
    pert = lc.BatchedPerturbationConfig.empty(1, model.num_blocks, args.x.device, args.x.dtype)
    return args, pert


# ---------------------------------------------------------------------------------------------
# Accuracy.

BRANCHES = ("attn1", "attn2", "ff")


def hooked_forward(lc, model, inputs: dict, dtype) -> dict:
    """Model output and every block's attn1 / attn2 / ff output."""
    got, handles = {}, []
    for i, blk in enumerate(model.transformer_blocks):
        for br in BRANCHES:
            def keep(_m, _inp, out, key=f"b{i}.{br}"):
                got[key] = out.detach()
            handles.append(getattr(blk, br).register_forward_hook(keep))
    try:
        vx, _ = model(modality(lc, inputs, dtype), None, None)
    finally:
        for h in handles:
            h.remove()
    got["out"] = vx.detach()
    return got


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


def compare(got: dict, ref: dict) -> dict:
    per = {k: rel_err(got[k], ref[k]) for k in ref}
    summary = {"out": per["out"]}
    for br in BRANCHES:
        summary[br] = max(v for k, v in per.items() if k.endswith("." + br))
    return {"summary": summary, "per_output": per}


# ---------------------------------------------------------------------------------------------
# Timing.

def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Entry:
    """One model family: a variant on a package (bf16 runs ltx-core's pure PyTorch path); with an
    SM90 hook, this package with the hook's tile set to ``tile`` while it runs (None: the host's
    pick), labelled ``ours@BMxBNxCLUSTER`` when forced."""

    def __init__(self, variant: str, package: str, lc, package_key: str, sm90: Sm90Hook | None = None,
                 tile: tuple | None = None):
        self.variant, self.package, self.lc = variant, package, lc
        self.package_key = package_key  # the Packages entry to activate before running it
        self.sm90, self.tile = sm90, tile
        self.dtype = torch.bfloat16
        self.models: dict[str, torch.nn.Module] = {}
        self.compile_configs: dict = {}
        self.label = f"{variant}/{package}"

    def activate(self, pk: Packages) -> None:
        """Before anything of this entry runs: its package's modules, its SM90 tile."""
        pk.activate(self.package_key)
        if self.sm90 is not None:
            self.sm90.tile = self.tile


def mode_callable(entry: Entry, mode: str, inputs: dict):
    """(fn, state): fn() runs one pass of `mode` and returns the block-stack output (or the model
    output for `full`)."""
    lc = entry.lc
    if mode == "full":
        model = entry.models["eager"]
        mod = modality(lc, inputs, entry.dtype)
        return lambda: model(mod, None, None)[0], None
    model = entry.models[mode if mode in ("compile", "captured") else "eager"]
    args, pert = prepare(lc, model, inputs, entry.dtype)
    if mode == "eager":
        return lambda: model._process_transformer_blocks(args, None, pert)[0].x, None
    if mode == "graph":
        lc.compiling._register_transformer_args_pytree()  # the runner keys captures by tensor shapes
        runner = lc.cudagraph_capture.CudaGraphRunner(model._process_transformer_blocks, model.block_input_processor)
        return lambda: runner(args, None, pert)[0].x, runner
    if mode == "compile":
        cfg = entry.compile_configs["compile"]

        def run():
            torch.compiler.cudagraph_mark_step_begin()
            with lc.compiling._compile_config_patches(cfg):
                return model._process_transformer_blocks(args, None, pert)[0].x
        return run, None
    if mode == "captured":  # _process_transformer_blocks is ltx-core's CudaGraphRunner here
        return lambda: model._process_transformer_blocks(args, None, pert)[0].x, model._process_transformer_blocks
    raise ValueError(mode)


@functools.lru_cache(maxsize=None)
def clock_sampler():
    """tools/nvml_clock.py's sampler (one, with its thread, per process) of the SM clock and board power."""
    return _import_tool("nvml_clock").ClockSampler()


def time_calls(fn, n: int, device) -> list[float]:
    if device.type != "cuda":  # the CPU path check of --smoke --time
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


class Turns:
    """When this process may use the GPU. Alone: always. As a worker of ``--split-processes`` (one
    process per package, ``--serve``): before each timing setup, each timed round and each profile
    it prints where it is (a key ordered like the run: token count, mode, round) and waits for the
    coordinator's go on stdin; after it, it prints that it is done. Protocol lines start with
    ``PROTOCOL``; everything else on stdout is the usual output."""

    def __init__(self, serve: bool):
        self.serve = serve

    @contextlib.contextmanager
    def __call__(self, *key):
        if not self.serve:
            yield
            return
        print(PROTOCOL + json.dumps({"ready": list(key)}), flush=True)
        if not sys.stdin.readline():
            raise SystemExit("the coordinator is gone")
        try:
            yield
        finally:
            print(PROTOCOL + json.dumps({"done": list(key)}), flush=True)


def failure(errors: list, what: str, log) -> None:
    """Record an exception and go on: one entry's failure must not cost the rest of the run."""
    tb = traceback.format_exc()
    errors.append({"what": what, "traceback": tb[-4000:]})
    log(f"FAILED {what}:\n{tb[-1500:]}")


def run_timing(mode: str, tokens: int, entries: list[Entry], pk: Packages, inputs: dict, eager_x: dict,
               args, device, log, errors: list, turn: Turns | None = None, key: tuple = ()) -> list[dict]:
    """Times ``mode`` for every entry: a setup (first call, warm-up), then rounds. Under a
    coordinator (``turn``), each of them runs in a turn keyed ``(*key, round)`` (round -1: the setup)."""
    turn = turn or Turns(False)
    fns, setup, vs_eager, runners, live = {}, {}, {}, [], []
    with turn(*key, -1):
        for e in entries:
            e.activate(pk)
            try:
                fn, runner = mode_callable(e, mode, inputs)
                if runner is not None:
                    runners.append(runner)
                sync(device)
                t0 = time.perf_counter()
                out = fn()
                sync(device)
                setup[e.label] = time.perf_counter() - t0
                if mode != "full":
                    vs_eager[e.label] = rel_err(out, eager_x[e.label])
                del out
                for _ in range(args.warmup):
                    fn()
                sync(device)
            except Exception:  # noqa: BLE001
                failure(errors, f"{mode} T={tokens} {e.label}", log)
                continue
            fns[e.label] = fn
            live.append(e)
    entries = live
    calls = {e.label: [] for e in entries}
    if not entries:
        for runner in runners:
            runner._captures.clear()
        return []
    per_round = {e.label: [] for e in entries}
    mhz, watts = {e.label: [] for e in entries}, {e.label: [] for e in entries}
    sampler = clock_sampler() if device.type == "cuda" else None
    for r in range(args.rounds):
        k = r % len(entries)
        with turn(*key, r):
            for e in entries[k:] + entries[:k]:
                e.activate(pk)
                if sampler is None:
                    ms, clock, power = time_calls(fns[e.label], args.iters, device), None, None
                else:
                    ms, clock, power = sampler.window(lambda fn=fns[e.label]: time_calls(fn, args.iters, device))
                calls[e.label] += ms
                per_round[e.label].append(statistics.median(ms))
                mhz[e.label].append(clock)
                watts[e.label].append(power)
    recs = []
    for e in entries:
        recs.append({"variant": e.variant, "package": e.package, "tokens": tokens, "mode": mode,
                     "median_ms": statistics.median(calls[e.label]), "min_ms": min(calls[e.label]),
                     "round_medians_ms": per_round[e.label], "round_mhz": mhz[e.label],
                     "round_watts": watts[e.label], "setup_s": setup[e.label],
                     "vs_eager": vs_eager.get(e.label)})
        clocks = [c for c in mhz[e.label] if c]
        log(f"  {mode:8s} T={tokens:6d} {e.label:12s} {recs[-1]['median_ms']:9.3f} ms"
            + (f" at {statistics.median(clocks):4.0f} MHz" if clocks else "")
            + f"  (setup {setup[e.label]:.1f} s, vs eager {vs_eager.get(e.label, float('nan')):.2e})")
    for runner in runners:  # free the captured graphs and their static buffers before the next mode
        runner._captures.clear()
    del fns
    return recs


def round_ratios(r: dict, other: dict) -> list[float]:
    """Per round, r's median time over other's (the rounds ran side by side)."""
    return [a / b for a, b in zip(r["round_medians_ms"], other["round_medians_ms"])]


def median_ci(values: list[float], conf: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free confidence interval of the median: the order statistics x[j] and
    x[n-1-j] with the largest j whose coverage 1 - 2 P(B <= j), B ~ Binomial(n, 1/2), still reaches
    ``conf``. None below 6 values (then no pair of order statistics reaches 95 %)."""
    x, n = sorted(values), len(values)
    if n < 6:
        return None
    j, tail = 0, 0.5 ** n  # tail = P(B <= j)
    while True:
        nxt = tail + math.comb(n, j + 1) * 0.5 ** n
        if 1 - 2 * nxt < conf:
            break
        j, tail = j + 1, nxt
    return x[j], x[n - 1 - j]


def ratios(records: list[dict]) -> list[dict]:
    """ours / upstream per (variant, T, mode), for each of this package's entries (the host's tiles,
    and each forced tile): median of the per-round ratios (same clock)."""
    out = []
    by = {(r["variant"], r["package"], r["tokens"], r["mode"]): r for r in records}
    for (v, p, t, m), r in by.items():
        up = by.get((v, "upstream", t, m))
        if not p.startswith("ours") or up is None:
            continue
        rr = round_ratios(r, up)
        rec = {"variant": v, "package": p, "tokens": t, "mode": m, "ours_over_upstream": statistics.median(rr),
               "ci95": median_ci(rr), "round_ratios": rr}
        # the SM clock each ran at, ours / upstream per round: under the power limit the clock follows
        # the power the kernels draw, so this says how much of a time ratio is clock
        pairs = [(x, a / b) for x, a, b in zip(rr, r.get("round_mhz") or [], up.get("round_mhz") or []) if a and b]
        if pairs:
            rec["clock_ours_over_upstream"] = statistics.median(c for _, c in pairs)
            # time x clock: the forward in SM cycles, ours / upstream (what is left once the clock is out)
            rec["cycles_ours_over_upstream"] = statistics.median(x * c for x, c in pairs)
        out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------
# One process per package, turns interleaved (--split-processes).
#
# ltx-core's compiled code cannot serve two packages named ltx_kernels in one process (Dynamo
# resolves some of what it traced by module name: upstream's compile then finds this package's
# modules), so compiled modes need a process per package. Run one after the other, two processes
# differ by more than the packages do (the same bf16 model: 1.3 % between two such processes at
# T = 32768). So the coordinator runs both at once and hands out the GPU: each setup, each round
# and each profile of one process runs alone, and round r of every process runs next to round r of
# the others, first one and then the other, alternating. bf16 runs in both processes: its ratio
# between them (``process_control``) is the protocol's own floor.

PROTOCOL = "@@ltx_core_block "


def coordinate(commands: dict[str, list[str]], out=None) -> dict[str, int]:
    """Runs one ``--serve`` worker per name (name -> argv) and grants turns: of the workers
    waiting, those at the earliest key go one at a time, the first of them rotating from grant to
    grant. Other output of the workers goes to ``out`` (stdout), prefixed with the name. Returns each
    worker's exit status."""
    out = out or sys.stdout
    procs = {n: subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
             for n, c in commands.items()}

    def until(n: str, what: str):
        """The key of worker n's next ``what`` line; None at its end."""
        for line in procs[n].stdout:
            if line.startswith(PROTOCOL):
                msg = json.loads(line[len(PROTOCOL):])
                if what in msg:
                    return tuple(msg[what])
            else:
                out.write(f"[{n}] {line}")
                out.flush()
        return None

    waiting = {n: until(n, "ready") for n in procs}
    grants = 0
    while any(k is not None for k in waiting.values()):
        first = min(k for k in waiting.values() if k is not None)
        group = [n for n in procs if waiting[n] == first]
        s = grants % len(group)
        grants += len(group) > 1  # (a turn of one alone does not shift the alternation)
        for n in group[s:] + group[:s]:
            with contextlib.suppress(BrokenPipeError):
                procs[n].stdin.write("go\n")
                procs[n].stdin.flush()
            until(n, "done")
        for n in group:
            waiting[n] = until(n, "ready")
    for p in procs.values():
        with contextlib.suppress(BrokenPipeError):
            p.stdin.close()
    return {n: p.wait() for n, p in procs.items()}


def worker_argv(argv: list[str], package: str, json_path: Path, workdir: Path | None) -> list[str]:
    """The coordinator's own arguments for one package's worker: without --split-processes,
    --packages, --json and --workdir (each worker gets its own)."""
    drop_flag, drop_value = {"--split-processes"}, {"--packages", "--json", "--workdir"}
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in drop_flag:
            continue
        if name in drop_value:
            skip = "=" not in a
            continue
        kept.append(a)
    kept += ["--packages", package, "--serve", "--json", str(json_path)]
    if workdir is not None:
        kept += ["--workdir", str(workdir / package)]
    return kept


def merge(results: dict[str, dict]) -> dict:
    """The workers' results (name -> results dict) as one: every record side by side, the bf16
    records of each process named ``torch@<name>``; ratios; the bf16 control between processes."""
    first = next(iter(results.values()))
    res = {"environment": first["environment"], "notes": [],
           "protocol": dict(first["protocol"], packages=list(results),
                            isolation="one process per package, turns interleaved by a coordinator (--split-processes)"),
           "ops_registered": {}, "ops_overlap": [], "accuracy": [], "timing": [], "ratios": [], "profile": [],
           "errors": []}
    for name, r in results.items():
        res["ops_registered"].update(r.get("ops_registered", {}))
        res["notes"] += [f"{name} process: {n}" for n in r.get("notes", [])]
        res["errors"] += [dict(e, what=f"{name} process: {e['what']}") for e in r.get("errors", [])]
        for key in ("accuracy", "timing", "profile"):
            for rec in r.get(key, []):
                res[key].append(dict(rec, package=f"torch@{name}") if rec.get("package") == "torch" else rec)
    res["ratios"] = ratios(res["timing"])
    res["process_control"] = process_control(res["timing"], list(results))
    return res


def process_control(records: list[dict], names: list[str]) -> list[dict]:
    """bf16 (pure PyTorch, the same in every process) in the first process over the second, per
    (T, mode): median of per-round ratios. Off 1.000 by what the split protocol itself costs."""
    if len(names) < 2:
        return []
    by = {(r["package"], r["tokens"], r["mode"]): r for r in records if r["variant"] == "bf16"}
    out = []
    for (p, t, m), r in by.items():
        other = by.get((f"torch@{names[1]}", t, m))
        if p != f"torch@{names[0]}" or other is None:
            continue
        rr = round_ratios(r, other)
        out.append({"tokens": t, "mode": m, "processes": names[:2], "bf16_ratio": statistics.median(rr),
                    "round_ratios": rr})
    return out


# ---------------------------------------------------------------------------------------------
# Profile.

def _device_us(evt) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(evt, attr, None)
        if v is not None:
            return float(v)
    return 0.0


def profile_entry(entry: Entry, inputs: dict, device, mode: str = "eager", n: int = 3, top: int = 15) -> dict:
    from torch.profiler import ProfilerActivity, profile

    fn, _ = mode_callable(entry, mode, inputs)
    for _ in range(2):
        fn()
    sync(device)
    host = []
    for _ in range(n):  # host time to issue one forward, with the GPU queue drained before each
        sync(device)
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
    sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    def forwards():
        with profile(activities=acts) as prof:
            for _ in range(n):
                fn()
            sync(device)
        return prof

    mhz = None
    if device.type == "cuda":
        prof, mhz, _ = clock_sampler().window(forwards)
    else:
        prof = forwards()
    avgs = prof.key_averages()
    kernels = [e for e in avgs if e.device_type == torch.autograd.DeviceType.CUDA and _device_us(e) > 0]
    gpu_total = sum(_device_us(e) for e in kernels) / n / 1e3
    kernels.sort(key=_device_us, reverse=True)
    cpu_ops = sorted((e for e in avgs if e.device_type == torch.autograd.DeviceType.CPU),
                     key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "mode": mode,
        "host_ms_per_forward": statistics.median(host),
        "gpu_kernel_ms_per_forward": gpu_total,
        "sm_mhz": mhz,
        "top_kernels": [{"name": e.key, "calls_per_forward": e.count / n, "ms_per_forward": _device_us(e) / n / 1e3}
                        for e in kernels[:top]],
        "top_cpu_ops": [{"name": e.key, "calls_per_forward": e.count / n,
                         "self_cpu_ms_per_forward": e.self_cpu_time_total / n / 1e3} for e in cpu_ops[:10]],
    }


def print_profile(label: str, tokens: int, p: dict) -> None:
    print(f"\n### profile {label}, T={tokens}, {p.get('mode', 'eager')}: host {p['host_ms_per_forward']:.2f} ms/forward, "
          f"GPU kernels {p['gpu_kernel_ms_per_forward']:.2f} ms/forward"
          + (f" at {p['sm_mhz']:.0f} MHz (median SM clock)" if p.get("sm_mhz") else ""))
    print("| kernel | calls/fwd | ms/fwd | % |\n|---|---:|---:|---:|")
    tot = p["gpu_kernel_ms_per_forward"] or float("nan")
    for k in p["top_kernels"]:
        print(f"| `{k['name'][:90]}` | {k['calls_per_forward']:g} | {k['ms_per_forward']:.3f} | "
              f"{100 * k['ms_per_forward'] / tot:.1f} |")
    print("| CPU op (self) | calls/fwd | ms/fwd | |\n|---|---:|---:|---|")
    for k in p["top_cpu_ops"]:
        print(f"| `{k['name'][:90]}` | {k['calls_per_forward']:g} | {k['self_cpu_ms_per_forward']:.3f} | |")


# ---------------------------------------------------------------------------------------------
# Run description.

def _git_commit() -> str:
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _ltx2_commit(ltx2: Path) -> str:
    if os.environ.get("LTX2_COMMIT"):
        return os.environ["LTX2_COMMIT"]
    for f in (ltx2 / "LTX2_COMMIT", ltx2.parent / "LTX2_COMMIT", REPO / ".upstream" / "LTX2_COMMIT"):
        if f.is_file():
            return f.read_text().strip()
    return "unknown"


def environment(args, device) -> dict:
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "device": "cpu",
           "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "repo_commit": args.repo_commit or _git_commit(), "ltx2_commit": _ltx2_commit(args.ltx2),
           "triton_interpret": os.environ.get("TRITON_INTERPRET", "")}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(device=p.name, sms=p.multi_processor_count, capability=f"{p.major}.{p.minor}")
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True, text=True, check=True).stdout.strip()
    return env


def print_tables(res: dict) -> None:
    acc = res["accuracy"]
    if acc:
        print("\n## accuracy (relative Frobenius error; branches: worst block)\n")
        print("| variant | package | T | out vs fp32 | attn1 | attn2 | ff | out vs bf16 | attn1 | attn2 | ff |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for a in acc:
            f32, b16 = a["vs_fp32"]["summary"], (a.get("vs_bf16") or {}).get("summary")
            cells = [f"{f32[k]:.2e}" for k in ("out", *BRANCHES)]
            cells += [f"{b16[k]:.2e}" for k in ("out", *BRANCHES)] if b16 else ["-"] * 4
            print(f"| {a['variant']} | {a['package']} | {a['tokens']} | " + " | ".join(cells) + " |")
    tim = res["timing"]
    if tim:
        modes = [m for m in ALL_MODES if any(r["mode"] == m for r in tim)]
        print("\n## time (median ms per pass through the blocks; full = whole eager forward)\n")
        print("| variant | package | T | " + " | ".join(modes) + " |")
        print("|---|---|---:|" + "---:|" * len(modes))
        rows = sorted({(r["variant"], r["package"], r["tokens"]) for r in tim}, key=lambda x: (x[2], x[0], x[1]))
        by = {(r["variant"], r["package"], r["tokens"], r["mode"]): r for r in tim}
        for v, p, t in rows:
            cells = [f"{by[(v, p, t, m)]['median_ms']:.3f}" if (v, p, t, m) in by else "-" for m in modes]
            print(f"| {v} | {p} | {t} | " + " | ".join(cells) + " |")
        if res["ratios"]:
            print("\n| variant | package | T | mode | ours / upstream time (median of per-round ratios) |"
                  " its 95 % interval | SM clock ours / upstream | SM cycles ours / upstream |"
                  "\n|---|---|---:|---|---:|---|---:|---:|")
            for r in res["ratios"]:
                clock, cycles = r.get("clock_ours_over_upstream"), r.get("cycles_ours_over_upstream")
                ci = r.get("ci95")
                print(f"| {r['variant']} | {r.get('package', 'ours')} | {r['tokens']} | {r['mode']} | "
                      f"{r['ours_over_upstream']:.3f} | " + (f"{ci[0]:.3f}-{ci[1]:.3f} | " if ci else "- | ")
                      + (f"{clock:.3f} | {cycles:.3f} |" if clock and cycles else "- | - |"))
        for c in res.get("process_control", []):
            print(f"\nbf16 in the {c['processes'][0]} process / the {c['processes'][1]} process, T={c['tokens']} "
                  f"{c['mode']}: {c['bf16_ratio']:.3f} (median of per-round ratios: the split protocol's floor)")
        comp = [r for r in tim if r["mode"] in ("compile", "captured")]
        if comp:
            print("\nfirst call (compile / capture) s: " + ", ".join(
                f"{r['variant']}/{r['package']} {r['mode']} T={r['tokens']}: {r['setup_s']:.1f}" for r in comp))
    for err in res.get("errors", []):
        print(f"\nFAILED {err['what']}: {(err['traceback'].strip().splitlines() or [''])[-1]}")


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ltx2", type=Path, help="LTX-2 monorepo root (holds packages/ltx-core)")
    ap.add_argument("--upstream-path", type=Path, help="folder printed by tools/upstream/build_upstream.sh")
    ap.add_argument("--json", type=Path, help="results file (written after each token count too)")
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096, help="model width (heads of 128)")
    ap.add_argument("--context-tokens", type=int, default=1024)
    ap.add_argument("--variants", default="bf16,fp8,fp6")
    ap.add_argument("--packages", default="ours,upstream")
    ap.add_argument("--modes", default="eager,graph,full,compile,captured")
    ap.add_argument("--no-time", action="store_true", help="accuracy only")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--iters", type=int, default=1, help="timed calls per entry per round")
    ap.add_argument("--warmup", type=int, default=2, help="calls after the first, before timing")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-tokens", help="token counts profiled, comma-separated (default: the largest of --tokens)")
    ap.add_argument("--profile-mode", default="eager", help="the mode profiled (eager, full, compile, ...)")
    ap.add_argument("--ours-sm90-lib", type=Path,
                    help="development: this package's SM90 GEMM through a kernel library (tools/sm90_build_standalone.sh LIB=1)")
    ap.add_argument("--ours-sm90-tiles", default="",
                    help="development: also time this package with every SM90 GEMM forced to each of these tiles, "
                         "e.g. 256x128x2,192x128x1 (entries ours@256x128x2, ...; same process, same models)")
    ap.add_argument("--split-processes", action="store_true",
                    help="one process per package, their setups, rounds and profiles interleaved by this one "
                         "(ltx-core's compiled modes need it)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a --split-processes worker
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo-commit", help="this repository's commit, when it is not a git checkout here")
    ap.add_argument("--workdir", type=Path, help="where the checkpoint goes (default: a temporary folder)")
    ap.add_argument("--budget-s", type=float,
                    help="start no new timing mode or profile after this many seconds (the rest is skipped, noted)")
    ap.add_argument("--report", type=Path, help="only print the tables of an earlier results file")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run: hidden 256, T 256, accuracy only")
    ap.add_argument("--time", action="store_true",
                    help="with --smoke: run the timing code too (modes eager, full, compile; CPU clock)")
    args = ap.parse_args(argv)
    if args.ltx2 is None and args.report is None:
        ap.error("--ltx2 is required")
    if args.smoke:
        args.hidden, args.tokens, args.context_tokens = 256, "256", 32
        args.no_time = not args.time
        if args.time:
            args.modes = ",".join(m for m in args.modes.split(",") if m in ("eager", "full", "compile"))
            args.rounds, args.iters, args.warmup = min(args.rounds, 2), min(args.iters, 1), 0
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.variants = [v for v in args.variants.split(",") if v]
    args.packages = [p for p in args.packages.split(",") if p]
    args.modes = [m for m in args.modes.split(",") if m]
    try:
        args.ours_sm90_tiles = parse_tiles(args.ours_sm90_tiles)
    except ValueError as e:
        ap.error(str(e))
    bad = set(args.variants) - {"bf16", *QUANT_VARIANTS} | set(args.modes) - set(ALL_MODES) \
        | set(args.packages) - {"ours", "upstream"}
    if bad:
        ap.error(f"unknown variant / mode / package: {sorted(bad)}")
    if args.hidden % 128:
        ap.error("--hidden must be a multiple of 128")
    return args


def run_split(args, argv: list[str]) -> int:
    """--split-processes: a worker per package under ``coordinate``, then their results as one."""
    tmp = Path(tempfile.mkdtemp(prefix="ltx_core_block_split_"))
    me = str(Path(__file__).resolve())
    commands = {p: [sys.executable, me, *worker_argv(argv, p, tmp / f"{p}.json", args.workdir)] for p in args.packages}
    rcs = coordinate(commands)
    results = {p: json.loads((tmp / f"{p}.json").read_text()) for p in args.packages if (tmp / f"{p}.json").is_file()}
    shutil.rmtree(tmp, ignore_errors=True)
    if not results:
        raise SystemExit(f"no worker wrote results (exit statuses {rcs})")
    res = merge(results)
    res["notes"] += [f"{p} process exited with status {rc}" for p, rc in rcs.items() if rc]
    print(f"\n# LTX-2 video transformer through ltx-core, one process per package ({', '.join(results)}), "
          f"turns interleaved: {args.blocks} blocks, hidden {args.hidden}, device {res['environment']['device']}")
    for n in res["notes"]:
        print(f"note: {n}")
    print_tables(res)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    return 0 if not any(rcs.values()) else 1


def main(argv=None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    if args.split_processes and not args.report:
        return run_split(args, list(sys.argv[1:] if argv is None else argv))
    turn = Turns(args.serve)
    if args.report:
        res = json.loads(args.report.read_text())
        res["ratios"] = ratios(res["timing"])  # with the columns added since the file was written
        print_tables(res)
        return 0
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    def over_budget(what: str) -> bool:
        if args.budget_s is None or time.perf_counter() - started < args.budget_s:
            return False
        res["notes"].append(f"skipped (over --budget-s {args.budget_s:g}): {what}")
        log(res["notes"][-1])
        return True
    core_src = args.ltx2 / "packages" / "ltx-core" / "src"
    if not (core_src / "ltx_core").is_dir():
        raise SystemExit(f"--ltx2 {args.ltx2}: no packages/ltx-core/src/ltx_core there")
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cpu" and not torch.cuda.is_available():
        # ltx-core's blockwise policy quantizes each weight on the GPU (value.cuda())
        torch.Tensor.cuda = lambda self, *a, **k: self
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is fp32
    torch.backends.cudnn.allow_tf32 = False

    notes, roots = [], {}
    if "ours" in args.packages:
        roots["ours"] = REPO
    if "upstream" in args.packages:
        up = args.upstream_path
        if up is None or not (up / "ltx_kernels").is_dir():
            notes.append(f"upstream skipped: no built package at --upstream-path {up}")
        elif device.type != "cuda":
            notes.append("upstream skipped: its extensions need CUDA")
        else:
            roots["upstream"] = up.resolve()
    for n in notes:
        log(n)
    quant = [v for v in args.variants if v in QUANT_VARIANTS]
    if not roots:
        raise SystemExit("no package to run (ltx-core's policies import ltx_kernels)")

    pk = Packages(roots, core_src)
    sm90 = None
    for name in roots:
        pk.load(name)
        if name == "ours" and (args.ours_sm90_lib or args.ours_sm90_tiles):
            lk = pk.ltx_core[name].ltx_kernels
            unknown = [t for t in args.ours_sm90_tiles if t not in lk.gemm.SM90_TILES]
            if unknown:
                raise SystemExit(f"--ours-sm90-tiles: {unknown} not among the SM90 tiles {sorted(lk.gemm.SM90_TILES)}")
            sm90 = Sm90Hook(lk, args.ours_sm90_lib)
            if args.ours_sm90_lib:
                notes.append(f"ours: SM90 GEMM launches through {args.ours_sm90_lib} (a kernel library, not the extension)")
            for t in args.ours_sm90_tiles:
                notes.append("ours@{}x{}x{}: every SM90 GEMM launch of this package forced to that tile".format(*t))
        log(f"{name}: ltx_kernels from {pk.ltx_core[name].ltx_kernels.__file__}; ops: {', '.join(pk.ops[name])}")
    overlap = sorted(set.intersection(*(set(v) for v in pk.ops.values()))) if len(pk.ops) > 1 else []
    # the references and the bf16 entry (pure PyTorch) run on the first package's ltx-core copy
    base = next(iter(roots))
    blc = pk.ltx_core[base]

    res = {"environment": environment(args, device), "notes": notes,
           "protocol": {"doc": "see the module docstring of bench/ltx_core_block.py",
                        "isolation": "in-process, sys.modules swapped per package", "tokens": args.tokens,
                        "blocks": args.blocks, "hidden": args.hidden, "heads": args.hidden // 128, "ffn": 4 * args.hidden,
                        "context_tokens": args.context_tokens, "sigma": SIGMA, "fps": FPS, "seed": args.seed,
                        "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup, "modes": args.modes,
                        "variants": args.variants, "packages": list(roots), "tf32": False},
           "ops_registered": pk.ops, "ops_overlap": overlap, "accuracy": [], "timing": [], "ratios": [],
           "profile": [], "errors": []}

    def save():
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(res, indent=1))

    config = transformer_config(args.hidden, args.blocks)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ltx_core_block_"))
    workdir.mkdir(parents=True, exist_ok=True)
    ckpt = workdir / "transformer.safetensors"
    pk.activate(base)
    t0 = time.perf_counter()
    write_checkpoint(blc, config, ckpt, args.seed, device)
    log(f"checkpoint {ckpt} ({ckpt.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s")

    ref32 = build_model(blc, ckpt, "fp32", device, args.blocks)
    ref16 = build_model(blc, ckpt, "bf16", device, args.blocks)
    res["environment"]["attention"] = blc.attention.attention_label(ref16.transformer_blocks[0].attn1.attention_function)
    entries = []
    if "bf16" in args.variants:
        e = Entry("bf16", "torch", blc, base)
        e.models["eager"] = ref16
        entries.append(e)
    for v in quant:
        for p in roots:
            e = Entry(v, p, pk.ltx_core[p], p, sm90 if p == "ours" else None)
            e.activate(pk)
            t0 = time.perf_counter()
            try:
                e.models["eager"] = build_model(e.lc, ckpt, v, device, args.blocks)
            except Exception:  # noqa: BLE001
                failure(res["errors"], f"build {e.label}", log)
                continue
            log(f"built {e.label} in {time.perf_counter() - t0:.1f} s")
            entries.append(e)
            if p == "ours":  # the forced tiles run the same eager model
                for t in args.ours_sm90_tiles:
                    f = Entry(v, "ours@{}x{}x{}".format(*t), e.lc, p, sm90, t)
                    f.models["eager"] = e.models["eager"]
                    entries.append(f)
    timed_modes = [] if args.no_time or (device.type != "cuda" and not args.smoke) else args.modes
    if timed_modes and ({"compile", "captured"} & set(timed_modes)):
        for e in entries:
            e.activate(pk)
            e.compile_configs = {"compile": e.lc.compiling.CompilationConfig(),
                                 "captured": e.lc.compiling.CompilationConfig(capture=True)}
            for m in ("compile", "captured"):
                if m in timed_modes:
                    try:
                        e.models[m] = build_model(e.lc, ckpt, e.variant, device, args.blocks,
                                                  compile_config=e.compile_configs[m])
                    except Exception:  # noqa: BLE001
                        failure(res["errors"], f"build {m} {e.label}", log)
    prof_tokens = {int(t) for t in args.profile_tokens.split(",")} if args.profile_tokens else {max(args.tokens)}

    with torch.inference_mode():
        for ti, tokens in enumerate(args.tokens):
            inputs = make_inputs(blc, tokens, args.context_tokens, args.hidden, device, args.seed)
            pk.activate(base)
            t0 = time.perf_counter()
            want32 = hooked_forward(blc, ref32, inputs, torch.float32)
            want16 = hooked_forward(blc, ref16, inputs, torch.bfloat16)
            log(f"T={tokens}: references in {time.perf_counter() - t0:.1f} s")
            eager_x = {}
            for e in entries:
                e.activate(pk)
                try:
                    got = want16 if e.variant == "bf16" else hooked_forward(e.lc, e.models["eager"], inputs, e.dtype)
                    rec = {"variant": e.variant, "package": e.package, "tokens": tokens,
                           "vs_fp32": compare(got, want32), "vs_bf16": None if e.variant == "bf16" else compare(got, want16)}
                    del got
                    if timed_modes:
                        fn, _ = mode_callable(e, "eager", inputs)
                        eager_x[e.label] = fn().clone()
                except Exception:  # noqa: BLE001
                    failure(res["errors"], f"accuracy T={tokens} {e.label}", log)
                    continue
                res["accuracy"].append(rec)
                s = rec["vs_fp32"]["summary"]
                log(f"  accuracy {e.label:12s} vs fp32: out {s['out']:.2e} attn1 {s['attn1']:.2e} "
                    f"attn2 {s['attn2']:.2e} ff {s['ff']:.2e}")
            del want32, want16
            save()
            if timed_modes:
                for mode in timed_modes:
                    if over_budget(f"{mode} T={tokens}"):
                        continue
                    live = [e for e in entries if e.label in eager_x]
                    recs = run_timing(mode, tokens, live, pk, inputs, eager_x, args, device, log, res["errors"],
                                      turn, (ti, ALL_MODES.index(mode)))
                    res["timing"] += recs
                    res["ratios"] = ratios(res["timing"])
                    save()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
            if args.profile and tokens in prof_tokens and not over_budget(f"profile T={tokens}"):
                with turn(ti, len(ALL_MODES), 0):
                    for e in entries:
                        e.activate(pk)
                        if args.profile_mode not in e.models and args.profile_mode not in ("eager", "graph", "full"):
                            continue
                        try:
                            p = profile_entry(e, inputs, device, args.profile_mode)
                        except Exception:  # noqa: BLE001
                            failure(res["errors"], f"profile T={tokens} {e.label}", log)
                            continue
                        res["profile"].append({"variant": e.variant, "package": e.package, "tokens": tokens, **p})
                        print_profile(e.label, tokens, p)
                save()
            del inputs, eager_x
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print(f"\n# LTX-2 video transformer through ltx-core: {args.blocks} blocks, hidden {args.hidden}, "
          f"device {res['environment']['device']}, torch {torch.__version__}, attention "
          f"{res['environment']['attention']}, ops overlap {overlap or 'none'}")
    for n in res["notes"]:
        print(f"note: {n}")
    print_tables(res)
    save()
    if args.workdir is None:
        ckpt.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            workdir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
