"""The clocks' alignment of the profiler-based mechanisms (pytest_opperf.recorded.alignment)."""

from __future__ import annotations

import pytest

from pytest_opperf.recorded import MARK_SLACK_NS, Mark, alignment

OFFSET = 1_700_000_000_000_000_000  # the profiler's clock minus perf_counter_ns


def made(at: int, span: int = 2_000, step: int | None = None, stamped: int | None = None
         ) -> tuple[Mark, int]:
    """A marker made from ``at`` for ``span`` ns whose event was stamped at ``stamped``
    (perf_counter_ns; default the middle of its span), and its event's start."""
    stamped = at + span // 2 if stamped is None else stamped
    return Mark(at, at + span, step), stamped + OFFSET


def offsets_of(*markers: tuple[Mark, int]) -> list[int]:
    marks, starts = zip(*markers, strict=True)
    return alignment(list(marks), list(starts))[0]


def test_an_uninterrupted_marker_gives_its_event_time_minus_its_middle() -> None:
    got = offsets_of(made(1_000_000), made(2_000_000, span=3_000, stamped=2_001_000),
                     made(3_000_000, step=0))
    assert got == [OFFSET, OFFSET - 500, OFFSET]


def test_an_interrupted_marker_takes_the_offset_of_the_nearest_uninterrupted_one() -> None:
    # the second marker's event was stamped right away, then a 3 ms collection ran inside it:
    # its middle is 1.5 ms past its stamp, and every op of its step would be filed 1.5 ms early
    got = offsets_of(made(1_000_000), made(2_000_000, span=3_000_000, stamped=2_000_100),
                     made(9_000_000, span=2_000, stamped=9_000_700))
    assert got == [OFFSET, OFFSET, OFFSET - 300]  # the first marker is the nearer
    got = offsets_of(made(1_000_000), made(8_000_000, span=3_000_000, stamped=8_000_100),
                     made(9_000_000, span=2_000, stamped=9_000_700))
    assert got == [OFFSET, OFFSET - 300, OFFSET - 300]  # the third is


def test_interrupted_markers_in_a_row_and_at_the_ends() -> None:
    # past the limit: the narrowest span (1 us, the last marker's) plus the slack
    slow = MARK_SLACK_NS + 2_000 + 1
    got = offsets_of(made(1_000_000, span=slow, stamped=1_000_000), made(2_000_000),
                     made(3_000_000, span=slow, stamped=3_000_000),
                     made(4_000_000, span=slow, stamped=4_000_000),
                     made(5_000_000, span=1_000, stamped=5_000_100))
    assert got == [OFFSET, OFFSET, OFFSET, OFFSET - 400, OFFSET - 400]
    # at the limit a marker is trusted: its middle is at most (narrowest + slack) / 2 off
    edge = MARK_SLACK_NS + 2_000
    got = offsets_of(made(1_000_000), made(2_000_000, span=edge, stamped=2_000_000))
    assert got == [OFFSET, OFFSET - edge // 2]


def test_too_few_markers_or_events_is_an_error() -> None:
    with pytest.raises(ValueError, match="1 marker events read for 2 markers made"):
        alignment([Mark(0, 1, None), Mark(2, 3, None)], [OFFSET])
    with pytest.raises(ValueError, match="at least the window's start and end"):
        alignment([Mark(0, 1, None)], [OFFSET])
