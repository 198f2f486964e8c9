"""tools/l2_tile_order.py: both tile orders visit every (row block, column group) once, and with a
cache that holds everything the model reads each operand chunk once. Pure Python."""
import importlib.util
import pathlib

import pytest

_spec = importlib.util.spec_from_file_location(
    "l2_tile_order", pathlib.Path(__file__).resolve().parents[1] / "tools" / "l2_tile_order.py")
model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model)


@pytest.mark.parametrize("num_m,num_groups", [(1, 1), (3, 5), (171, 32), (128, 16), (7, 33)])
@pytest.mark.parametrize("order", [model.rows_walk_columns, model.columns_walk_rows,
                                   lambda a, b: model.columns_walk_rows(a, b, 8)])
def test_orders_are_permutations(order, num_m, num_groups):
    units = order(num_m, num_groups)
    assert sorted(units) == [(m, g) for m in range(num_m) for g in range(num_groups)]


def test_unbounded_cache_reads_each_chunk_once():
    m, n, k = 1024, 512, 1024
    for order in (model.rows_walk_columns, model.columns_walk_rows):
        got = model.dram_read_mb(m, n, k, 128, 128, 1, order, capacity_mb=1e6)
        assert got == pytest.approx((m * k + n * k) / 1e6)
