"""The window ring: bounded, chronological, NaN where a sample has no value."""

from __future__ import annotations

import math

import pytest

from gpuwait.core.ring import ColumnRing


# -- ColumnRing ----------------------------------------------------------------------------


def test_ring_needs_two_rows():
    with pytest.raises(ValueError):
        ColumnRing(1)


def test_ring_chronological_before_and_after_wrap():
    ring = ColumnRing(4)
    for i in range(3):
        ring.append(float(i), {"a": i * 10.0})
    assert ring.view().times == [0.0, 1.0, 2.0]
    for i in range(3, 7):
        ring.append(float(i), {"a": i * 10.0})
    view = ring.view()
    assert view.times == [3.0, 4.0, 5.0, 6.0]
    assert view.column("a") == [30.0, 40.0, 50.0, 60.0]
    assert len(ring) == 4


def test_ring_missing_values_are_nan_and_late_columns_aligned():
    ring = ColumnRing(5)
    ring.append(0.0, {"a": 1.0})
    ring.append(1.0, {"a": 2.0, "b": 5.0})
    ring.append(2.0, {"b": 6.0})
    view = ring.view()
    a, b = view.column("a"), view.column("b")
    assert a[:2] == [1.0, 2.0] and math.isnan(a[2])
    assert math.isnan(b[0]) and b[1:] == [5.0, 6.0]
    missing = view.column("never")
    assert len(missing) == 3 and all(math.isnan(v) for v in missing)


def test_ring_drops_column_absent_for_a_full_lap():
    ring = ColumnRing(3)
    ring.append(0.0, {"gone": 1.0, "kept": 1.0})
    for t in range(1, 6):
        ring.append(float(t), {"kept": float(t)})
    assert "gone" not in ring.view().columns
    assert "kept" in ring.view().columns


def test_ring_view_since_cuts_old_rows():
    ring = ColumnRing(10)
    for t in range(6):
        ring.append(float(t), {"a": float(t)})
    view = ring.view(since=3.5)
    assert view.times == [4.0, 5.0]
    assert view.column("a") == [4.0, 5.0]
    assert len(ring.view(since=100.0)) == 0


def test_ring_view_is_a_copy():
    ring = ColumnRing(3)
    ring.append(0.0, {"a": 1.0})
    view = ring.view()
    ring.append(1.0, {"a": 2.0})
    assert view.times == [0.0] and view.column("a") == [1.0]


def test_a_view_keeps_its_columns_while_the_ring_gains_and_drops_columns():
    # The rows are stored one after another: a column added or dropped rewrites every row,
    # which must neither move a value to another column nor reach a view already made.
    ring = ColumnRing(3)
    ring.append(0.0, {"a": 1.0, "gone": 7.0})
    ring.append(1.0, {"a": 2.0, "gone": 8.0})
    before = ring.view()
    ring.append(2.0, {"a": 3.0, "b": 30.0})
    assert ring.width == 3
    after = ring.view()
    assert list(after.columns) == ["a", "gone", "b"]
    assert after.column("a") == [1.0, 2.0, 3.0]
    assert after.column("gone")[:2] == [7.0, 8.0] and math.isnan(after.column("gone")[2])
    assert math.isnan(after.column("b")[0]) and after.column("b")[2] == 30.0
    for t in (3.0, 4.0, 5.0):  # "gone" absent for a full lap: dropped at the lap's end
        ring.append(t, {"a": t + 1.0, "b": t * 10.0})
    assert ring.width == 2
    latest = ring.view()
    assert list(latest.columns) == ["a", "b"]
    assert latest.column("a") == [4.0, 5.0, 6.0] and latest.column("b") == [30.0, 40.0, 50.0]
    assert latest.steady("a") and latest.increase("a") == (2.0, 2.0)
    assert latest.steady("b") and latest.rate("b") == 10.0
    # The views made before still read what they copied.
    assert list(before.columns) == ["a", "gone"] and before.column("gone") == [7.0, 8.0]
    assert before.steady("a") and before.increase("a") == (1.0, 1.0)
    assert after.column("a") == [1.0, 2.0, 3.0] and not after.steady("b")


def test_a_view_copies_into_the_last_view_s_buffer_only_once_that_view_is_gone():
    ring = ColumnRing(4)
    for t in range(6):
        ring.append(float(t), {"a": float(t), "b": 10.0 * t})
    first = ring.view()
    held = first.column("a")
    ring.append(6.0, {"a": 6.0, "b": 60.0})
    second = ring.view()  # the first still lives: its rows are not written over
    assert first.column("b") == [20.0, 30.0, 40.0, 50.0] and held == [2.0, 3.0, 4.0, 5.0]
    assert second.column("b") == [30.0, 40.0, 50.0, 60.0]
    buffer = ring._lent[1]
    del first, second
    ring.append(7.0, {"a": 7.0, "b": 70.0})
    third = ring.view(since=5.5)  # the second is gone: its buffer is used again
    assert ring._lent[1] is buffer
    assert third.column("a") == [6.0, 7.0] and third.column("b") == [60.0, 70.0]
    assert third.increase("b") == (10.0, 1.0)


# -- the steady counters a view answers from their ends -------------------------------------

from hypothesis import given, strategies as st  # noqa: E402

from gpuwait.core.series import interval_rates, steady, total_increase  # noqa: E402

#: A step of a counter: forward, a reset, a missing read, or the same value.
_steps = st.one_of(st.floats(0, 1e6), st.just(-5.0), st.just(math.nan), st.just(0.0))
#: A row: a time step (0 and negative ones are a clock that did not advance) and, per key,
#: a counter step or the key's absence from the row.
_rows = st.lists(st.tuples(st.sampled_from([0.1, 0.1, 0.1, 0.0, -0.05]),
                           st.fixed_dictionaries({k: st.one_of(st.none(), _steps) for k in "abc"})),
                 min_size=0, max_size=40)
#: Rows of the usual window, which the views answer from the counters' ends: irregular
#: intervals, every counter read and going forward.
_steady_rows = st.lists(st.tuples(st.floats(0.01, 0.2), st.fixed_dictionaries({k: st.floats(0, 1e6) for k in "abc"})),
                        min_size=0, max_size=40)


@given(capacity=st.integers(2, 9), rows=st.one_of(_rows, _steady_rows), cut=st.floats(0, 1))
def test_a_view_answers_each_counter_as_the_rows_would(capacity, rows, cut):
    ring = ColumnRing(capacity)
    t, values = 100.0, {k: 0.0 for k in "abc"}
    for dt, steps in rows:
        t += dt
        row = {}
        for key, step in steps.items():
            if step is None:
                continue
            if step == step:
                values[key] = max(0.0, values[key] + step) if step >= 0 else 0.0
                row[key] = values[key]
            else:
                row[key] = math.nan
        ring.append(t, row)
    view = ring.view(since=t - cut)
    for key in view.columns:
        column = view.columns[key]
        assert view.steady(key) == (len(view) >= 2 and steady(view.times, column))
        assert view.increase(key) == total_increase(view.times, column)
        assert view.increase(key, modulus=1e9) == total_increase(view.times, column, 1e9)
        assert view.interval_rates(key) == interval_rates(view.times, column)
        assert view.interval_rates(key, modulus=1e9) == interval_rates(view.times, column, 1e9)


def test_a_counter_that_went_back_is_steady_again_once_the_reset_leaves_the_window():
    ring = ColumnRing(4)
    for i, v in enumerate([5.0, 6.0, 1.0, 2.0, 3.0, 4.0]):
        ring.append(100.0 + i, {"c": v})
        # One row is no window; the reset (6 -> 1) is held from the third row to the fifth.
        assert ring.view().steady("c") == (i in (1, 5))
    assert ring.view().increase("c") == (3.0, 3.0)


def test_a_view_of_plain_lists_computes_from_the_rows():
    from gpuwait.core.ring import WindowView

    view = WindowView([0.0, 1.0, 2.0], {"c": [0.0, 4.0, 1.0]})
    assert not view.steady("c")
    assert view.increase("c") == total_increase(view.times, view.columns["c"]) == (4.0, 1.0)
    assert view.rate("c") == 4.0
    assert view.increase("absent") is None


def test_a_clock_that_stood_still_before_the_view_starts_leaves_it_steady():
    ring = ColumnRing(8)
    for t, v in [(100.0, 1.0), (100.0, 2.0), (101.0, 0.5), (102.0, 3.0), (103.0, 4.0)]:
        ring.append(t, {"c": v})
    assert not ring.view().steady("c")
    # The pairs the view leaves out hold both the stalled clock and the reset.
    view = ring.view(since=100.5)
    assert view.times == [101.0, 102.0, 103.0]
    assert view.steady("c") and view.increase("c") == (3.5, 2.0)


def test_views_number_their_rows_for_the_ring_s_life_and_share_its_memo():
    ring = ColumnRing(3)
    for i in range(5):
        ring.append(100.0 + i, {"c": float(i)})
    view = ring.view(since=103.0)
    assert view.times == [103.0, 104.0] and view.first_row == 3
    memo = view.interval_memo("m")
    memo.update({1: "gone", 2: "gone", 3: "kept"})
    ring.append(105.0, {"c": 5.0})
    later = ring.view()
    assert later.first_row == 3
    # The memo is the ring's, and forgets the intervals whose first row the ring no longer holds.
    assert later.interval_memo("m") == {3: "kept"}


def test_a_view_of_plain_lists_has_no_memo():
    from gpuwait.core.ring import WindowView

    assert WindowView([0.0, 1.0], {"c": [0.0, 1.0]}).interval_memo("m") is None


def test_a_view_hands_out_a_column_as_stored_or_as_a_list_with_the_same_values():
    from array import array

    from gpuwait.core.ring import WindowView

    ring = ColumnRing(4)
    for i in range(6):
        ring.append(float(i), {"c": float(i * i)})
    view = ring.view()
    assert isinstance(view.values("c"), array) and list(view.values("c")) == view.columns["c"] == [4.0, 9.0, 16.0, 25.0]
    absent = view.values("absent")
    assert len(absent) == 4 and all(v != v for v in absent)
    plain = WindowView([0.0, 1.0], {"c": [1.0, 2.0]})
    assert plain.values("c") == [1.0, 2.0]


# -- rows handed over as one key tuple and a list of values ---------------------------------

from gpuwait.core.ring import ColumnRow, RowKeys  # noqa: E402


def _same_views(a, b) -> None:
    va, vb = a.view(), b.view()
    assert list(va.times) == list(vb.times) and list(va.columns) == list(vb.columns)
    for key in va.columns:
        assert [x if x == x else "nan" for x in va.columns[key]] == [x if x == x else "nan" for x in vb.columns[key]]
        assert va.steady(key) == vb.steady(key) and va.increase(key) == vb.increase(key)


#: Per row, the devices present (in the order a kernel lists them) and a value step.
#: Runs of one device list and of missing values long enough for the ring to drop a column.
_device_rows = st.lists(st.tuples(st.one_of(st.sampled_from([["p", "q"], ["q", "p", "r"], []]),
                                            st.lists(st.sampled_from("pqrs"), unique=True, max_size=4)),
                                  st.one_of(st.sampled_from([1.0, 2.5, math.nan]), st.floats(0, 1e3))),
                        max_size=30)


@given(capacity=st.integers(2, 6), rows=_device_rows)
def test_a_ring_takes_a_column_row_as_it_takes_the_same_mapping(capacity, rows):
    """Devices appear, vanish and change order: the ring holding rows given as ColumnRows is
    the ring holding the same rows given as dicts, view for view."""
    keys_of = RowKeys(("x", "y"))
    by_row, by_dict = ColumnRing(capacity), ColumnRing(capacity)
    total = 0.0
    for i, (devices, step) in enumerate(rows):
        total += step if step == step else 0.0
        values = [total if step == step else math.nan for _ in range(2 * len(devices))] + [float(i)]
        row = ColumnRow(keys_of(devices, ("clock",)), values)
        by_row.append(i * 0.1, row)
        by_dict.append(i * 0.1, dict(zip(row.keys_in_order, row.values_in_order)))
        _same_views(by_row, by_dict)


def test_a_column_dropped_and_back_or_a_new_order_costs_one_plan_per_key_tuple():
    keys_of = RowKeys(("x",))
    by_row, by_dict = ColumnRing(2), ColumnRing(2)
    rows = [(["p", "q"], math.nan), (["p", "q"], math.nan), (["p", "q"], math.nan),  # dropped: a lap of NaN
            (["p", "q"], 1.0), (["q", "p"], 2.0), (["q"], 3.0), (["q", "p", "r"], 4.0)]
    plans = []
    for i, (devices, value) in enumerate(rows):
        row = ColumnRow(keys_of(devices, ("clock",)), [value] * len(devices) + [float(i)])
        by_row.append(i * 0.1, row)
        by_dict.append(i * 0.1, dict(row))
        _same_views(by_row, by_dict)
        plans.append(by_row._row_plan)
    assert by_row.view().columns[("x", "p")][-1] == 4.0 and math.isnan(by_row.view().columns[("x", "p")][0])
    # Back after the drop, the columns sit after "clock": the rows are put in the ring's order,
    # by one plan that the next row with the same keys reuses; other keys, another plan.
    assert plans[2][1] == [2, 0, 1] and plans[3] is plans[2] and plans[4] is not plans[3]


def test_row_keys_are_one_tuple_while_the_items_stay():
    keys_of = RowKeys(("x", "y"))
    first = keys_of(["a", "b"], ("n",))
    assert first == (("x", "a"), ("y", "a"), ("x", "b"), ("y", "b"), "n")
    assert keys_of(["a", "b"], ("n",)) is first
    assert keys_of(["a", "b"]) == first[:-1]
    assert keys_of(["b", "a"], ("n",)) == (("x", "b"), ("y", "b"), ("x", "a"), ("y", "a"), "n")


def test_a_column_row_is_the_mapping_it_stands_for():
    row = ColumnRow((("x", "a"), "n"), [1.5, 2.0])
    assert row == {("x", "a"): 1.5, "n": 2.0} and dict(row) == {("x", "a"): 1.5, "n": 2.0}
    assert list(row) == [("x", "a"), "n"] and len(row) == 2 and row.get("m") is None
    with pytest.raises(ValueError):
        ColumnRow(("x",), [1.0, 2.0])
