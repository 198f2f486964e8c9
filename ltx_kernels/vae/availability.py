"""Upstream's ``ltx_kernels.vae.availability`` names (see :mod:`ltx_kernels.vae`)."""
from . import UNSUPPORTED_MESSAGE, gpu_supports_dsl_kernels  # noqa: F401
