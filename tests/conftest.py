import os

# The All2All tests host W <= 8 ranks in one process, one stream each, and the ranks' kernels wait
# for each other: every stream needs its own hardware queue. CUDA has 8 unless this is set before
# the context is created (W = 8 timed out under compute-sanitizer with 8).
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import pytest  # noqa: E402
import torch  # noqa: E402

# The kernels run under Triton's interpreter on machines without a GPU. Set before any kernel
# module is imported (they are imported lazily by the wrappers).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
                      else "cpu")


@pytest.fixture(autouse=True)
def poison_empty():
    """torch.empty fills floats with NaN and ints with their max while this is on: unwritten
    outputs show up as NaN / garbage instead of passing by luck."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(False)


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture(autouse=True)
def seed(request):
    torch.manual_seed(abs(hash(request.node.name)) % (2**31))


# Hypothesis profiles of the property tests (tests/test_properties.py), chosen by
# LTX_KERNELS_HYPOTHESIS_PROFILE: "ci" (default) draws the same examples on every run (fixed seed)
# and as many as CI's CPU interpreter affords (about 2 minutes); "gpu" draws five times as many,
# from a fresh seed each run (printed on failure; --hypothesis-seed=N repeats a run). Each test scales its own count
# by max_examples / 10. Function-scoped fixtures (the autouse ones above) are shared by the
# examples of a test, which is what they are for.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the property tests skip themselves
    pass
else:
    _common = dict(deadline=None, database=None, print_blob=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                          HealthCheck.data_too_large, HealthCheck.filter_too_much])
    settings.register_profile("ci", max_examples=10, derandomize=True, **_common)
    settings.register_profile("gpu", max_examples=50, **_common)
    settings.load_profile(os.environ.get("LTX_KERNELS_HYPOTHESIS_PROFILE", "ci"))
