"""The same function under ``ltx_kernels.blockwise.arch`` (the path older upstream releases used)."""
from ..arch import get_device_arch  # noqa: F401
