"""tools/sm90_trace.py reads the event log of the SM90 kernel's `trace` variant: its summary of a
synthetic log with known periods (no GPU)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import sm90_trace as tr  # noqa: E402


def _consumer_log(tiles=5, kblocks=4, waves=2, block=1000, epilogue=1500, wgmma=300, promote=100):
    """One consumer's records: every block takes `block` cycles, plus `epilogue` in a tile's first
    block after the CTA's first tile (where the previous tile's epilogue runs)."""
    ev, t = [], 1000
    for tile in range(tiles):
        for p in range(kblocks):
            t0 = t
            for w in range(waves):
                ev.append((tr.ISSUE + w, t))
                t += 10
                ev.append((tr.ISSUED + w, t))
                if w == 0 and p == 0 and tile > 0:
                    ev.append((tr.EPI_BEGIN, t))
                    ev += [(tr.BOX_FREE, t + 100), (tr.BOX_WRITTEN, t + 600), (tr.BOX_FREE, t + 900),
                           (tr.BOX_WRITTEN, t + 1400)]
                    t += epilogue
                    ev.append((tr.EPI_END, t))
                if w == waves - 1:
                    ev += [(tr.ACQ_BEGIN, t), (tr.ACQ_END, t + 40)]
                t += wgmma
                ev.append((tr.WAITED + w, t))
                t += promote
                ev.append((tr.PROMOTED + w, t))
            t = t0 + block + (epilogue if p == 0 and tile > 0 else 0)
    return ev


def _words(events, slots=512):
    w = [(code << 56) | ((i % 256) << 48) | clk for i, (code, clk) in enumerate(events)]
    return w + [0] * (slots - len(w))


def test_decode_stops_at_the_first_empty_slot():
    words = _words([(tr.ISSUE, 5), (tr.ISSUED, 9)])
    assert tr.decode(words) == [(tr.ISSUE, 5), (tr.ISSUED, 9)]


def test_lost_records_are_detected():
    words = _words([(tr.ISSUE, 5), (tr.ISSUED, 9), (tr.WAITED, 12)])
    words[1] = (tr.ISSUED << 56) | (7 << 48) | 9  # overwritten by a later record
    with pytest.raises(ValueError, match="lost"):
        tr.decode(words)


def test_summary_of_a_known_timeline():
    r = tr.summarize_consumer(_consumer_log(), waves=2)
    assert r["kblocks"] == 4
    assert r["tiles"] == 3  # whole tiles after the first whose successor started
    assert r["steady_block_period"] == 1000
    assert r["tile_period"] == 4 * 1000 + 1500
    assert r["tile_excess"] == 1500
    assert r["block_period_by_place"] == [2500, 1000, 1000, 1000]
    assert r["epilogue"] == 1500
    assert r["epilogue_parts_per_tile"] == {"before_first_box": 100, "box_free_wait": 300, "box_write": 1000}
    assert r["acquire_wait_by_place"] == [40, 40, 40, 40]
    assert r["wgmma_wait_by_place"]["1.0"] == 300
    assert r["wgmma_wait_by_place"]["0.0"] == 300 + 1500  # the epilogue runs between issue and wait
    assert r["promotion"] == 100


def test_whole_buffer_and_tensor_busy():
    log = _consumer_log()
    buf = [[_words([]), _words(log), _words(log), _words([])], [_words([])] * 4]
    s = tr.summarize(buf, waves=2, consumers=2)
    assert list(s) == ["cta0"]  # a CTA without records is left out
    busy = s["cta0"]["tensor_busy"]
    assert 0 < busy < 1
    assert "tile excess 1500" in tr.report("x", s)


def test_too_short_a_log_is_reported_not_summarized():
    r = tr.summarize_consumer(_consumer_log(tiles=2), waves=2)
    assert "note" in r


@pytest.mark.parametrize("cfg,expect", [((256, 128, 1), (2, 2)), ((192, 128, 1), (1, 3)), ((256, 128, 2), (2, 2))])
def test_waves_and_consumers_of_a_tile(cfg, expect):
    assert tr._waves_consumers(cfg) == expect
