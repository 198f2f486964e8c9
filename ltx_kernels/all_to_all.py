"""``ltx_kernels.all_to_all`` (upstream's module path) for :class:`ltx_kernels.all2all.All2All`."""
from .all2all import All2All, All2AllTimeout  # noqa: F401

__all__ = ["All2All", "All2AllTimeout"]
