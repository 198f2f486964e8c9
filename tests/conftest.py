import os

import pytest
import torch

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
