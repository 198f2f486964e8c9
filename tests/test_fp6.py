import pytest
import torch

import ltx_kernels as lk
from ltx_kernels import _dispatch
from ltx_kernels import reference as ref


def _upstream_pack_row(row):
    """Upstream's layout written out byte by byte (§2 of the reference doc)."""
    out = []
    for g in range(0, len(row), 4):
        v = [((b >> 7) << 5) | (b & 0x1F) for b in row[g:g + 4]]
        out += [(v[0] << 2 | v[1] >> 4) & 0xFF, ((v[1] & 0xF) << 4 | v[2] >> 2) & 0xFF, ((v[2] & 3) << 6 | v[3]) & 0xFF]
    return out


def _fp6_codes(shape, device):
    return torch.randint(0, 256, shape, device=device, dtype=torch.uint8) & 0x9F  # bits 6-5 clear


def test_reference_matches_upstream_bytes():
    x = _fp6_codes((3, 16), "cpu")
    want = torch.tensor([_upstream_pack_row(r.tolist()) for r in x], dtype=torch.uint8)
    assert torch.equal(ref.fp6_pack(x), want)
    assert torch.equal(ref.fp6_unpack(want, 16), x)


def test_known_bytes():
    # codes 0x3F,0x00,0x15,0x2A -> 111111 000000 010101 101010
    x = torch.tensor([[0x9F, 0x00, 0x15, 0x8A]], dtype=torch.uint8)
    assert ref.fp6_pack(x).tolist() == [[0b11111100, 0b00000101, 0b01101010]]


@pytest.mark.parametrize("shape", [(4,), (3, 8), (5, 36), (2, 3, 64), (7, 1028), (1, 4100)])
def test_pack_unpack_bit_exact(device, shape):
    x = _fp6_codes(shape, device)
    p = lk.fp6_pack(x, backend="triton")
    assert torch.equal(p, ref.fp6_pack(x))
    u = lk.fp6_unpack(p, shape[-1], backend="triton")
    assert torch.equal(u, x)


def test_float8_input_and_unaligned_and_strided(device):
    base = _fp6_codes((4, 80), device)
    x = base[:, 4:68]  # row-strided, start not 16-byte aligned
    p = lk.fp6_pack(x.view(torch.float8_e4m3fn), backend="triton")
    assert torch.equal(p, ref.fp6_pack(x.contiguous()))
    unaligned = ref.fp6_pack(base.contiguous()).view(-1)[3:3 + 48].view(1, 48)
    assert torch.equal(lk.fp6_unpack(unaligned, 64, backend="triton"), ref.fp6_unpack(unaligned, 64))


def test_fp6_weights_round_trip_through_quantizer(device):
    w = torch.randn(256, 256, device=device)
    q, s = lk.quantize_weights_blockwise(w, scale_max=lk.FP6_SCALE_MAX)
    lk.fp6_check(q)  # every code fits
    p = lk.fp6_pack(q, check=True, backend="triton")
    assert torch.equal(lk.fp6_unpack(p, 256, backend="triton").view(torch.float8_e4m3fn).view(torch.uint8),
                       q.view(torch.uint8))


def test_check_reports_values_that_do_not_fit(device):
    x = _fp6_codes((2, 8), device)
    x[1, 5] = 0x40  # 2.0 in e4m3: exponent bit 6 set
    with pytest.raises(lk.FP6RangeError, match=r"1 value\(s\).*index \(1, 5\)"):
        lk.fp6_pack(x, check=True)
    lk.fp6_pack(x)  # without check: packs (drops the bits), as upstream


def test_bad_inputs():
    with pytest.raises(ValueError, match="multiple of 4"):
        lk.fp6_pack(torch.zeros(2, 6, dtype=torch.uint8))
    with pytest.raises(TypeError, match="dtype"):
        lk.fp6_pack(torch.zeros(2, 8, dtype=torch.float32))
    with pytest.raises(ValueError, match="3\\*n/4"):
        lk.fp6_unpack(torch.zeros(2, 6, dtype=torch.uint8), 12)
    with pytest.raises(TypeError, match="n must be an int"):
        lk.fp6_unpack(torch.zeros(2, 6, dtype=torch.uint8), 8.0)
    with pytest.raises(ValueError, match="n .* must be >= 0"):
        lk.fp6_unpack(torch.zeros(2, 3, dtype=torch.uint8), -4)
    with pytest.raises(TypeError, match="check must be a bool"):
        lk.fp6_pack(torch.zeros(2, 8, dtype=torch.uint8), check="no")
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        lk.fp6_check(None)
    with pytest.raises(TypeError, match="x must have dtype in .uint8, float8_e4m3fn"):
        lk.fp6_check(torch.full((4,), 0.05))  # fp32 values, not codes


def test_repeat_calls_same_signature(device):
    """Fresh inputs of one signature, call after call: on a GPU the second call onwards takes the
    per-signature plan (direct launch), which must give the same bytes; a tensor whose storage
    needs a copy (strided rows) must not be planned."""
    from ltx_kernels import fp6

    for _ in range(4):
        x = _fp6_codes((6, 256), device)
        xs = _fp6_codes((6, 512), device)[:, ::2]  # rows need a copy
        for xx in (x, xs):
            p = lk.fp6_pack(xx, backend="triton")
            assert torch.equal(p, ref.fp6_pack(xx.contiguous()))
            assert torch.equal(lk.fp6_unpack(p, 256, backend="triton"), xx)
    if device.type == "cuda":
        gen = fp6.tuning.generation
        assert fp6._plans.get(_dispatch.signature(("fp6_pack", x, "triton", gen)))
        assert fp6._plans.get(_dispatch.signature(("fp6_unpack", p, 256, "triton", gen)))
        assert not fp6._plans.get(_dispatch.signature(("fp6_pack", xs, "triton", gen))), \
            "a plan kept for rows that needed a copy"


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 16), (3, 0)])
def test_empty_tensors(device, backend, shape):
    x = torch.zeros(shape, device=device, dtype=torch.uint8)
    p = lk.fp6_pack(x, backend=backend)
    assert p.shape == shape[:-1] + (shape[-1] // 4 * 3,) and p.dtype == torch.uint8
    u = lk.fp6_unpack(p, shape[-1], backend=backend)
    assert u.shape == shape and u.dtype == torch.uint8
