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
