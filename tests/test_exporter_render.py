"""The /metrics text of exporter/serve/exposition.py, value by value."""
from __future__ import annotations

import math

from slicemeter.exporter.serve.catalogue import Family
from slicemeter.exporter.serve.exposition import FamilyTexts, LabelText, Samples, render
from slicemeter.exporter.serve.scrape import LabelTuples

FAMILY = Family("slicemeter_test_ratio", "gauge", "test", ("slice",), "slice")


def lines(values: list, labels: LabelText | None = None, texts: FamilyTexts | None = None,
          tuples: LabelTuples | None = None) -> list[str]:
    fam = Samples(FAMILY)
    for i, v in enumerate(values):
        fam.add(tuples((str(i),)) if tuples else (str(i),), v)
    return render([fam], labels, texts).splitlines()[2:]


def test_each_value_is_written_as_prometheus_parses_it_repeated_or_not():
    """Equal floats share their text within a render; 0.0 and -0.0 are equal keys with
    different texts, and NaN never equals itself."""
    values = [0.25, 0.0, -0.0, 0.25, -0.0, 0.0, 1e22, 5e-324, math.nan, math.nan, math.inf, -math.inf, 3, -7, 0.25]
    texts = [line.rsplit(" ", 1)[1] for line in lines(values)]
    assert texts == ["0.25", "0.0", "-0.0", "0.25", "-0.0", "0.0", "1e+22", "5e-324", "NaN", "NaN", "+Inf", "-Inf",
                     "3", "-7", "0.25"]


def test_a_series_text_follows_its_current_values_only():
    """Label texts are kept across renders, values never: a later render writes its own
    values, and a series missing from the rows is not written."""
    kept = LabelText()
    assert lines([0.5, 0.75], kept) == ['slicemeter_test_ratio{slice="0"} 0.5', 'slicemeter_test_ratio{slice="1"} 0.75']
    assert lines([0.125], kept) == ['slicemeter_test_ratio{slice="0"} 0.125']


def test_a_family_text_is_reused_only_for_exactly_the_same_values():
    """Renders kept across Ticks reuse a family's text when its rows repeat, and never when a
    value is equal but written otherwise (1 and 1.0, 0.0 and -0.0, True and 1) or changed."""
    texts, labels, tuples = FamilyTexts(), LabelText(), LabelTuples()
    ticks = [[1, 0.0, 0.5, math.nan], [1, 0.0, 0.5, math.nan], [1.0, -0.0, 0.5, math.nan], [1.0, -0.0, 0.5, math.nan],
             [True, 0.0, 0.5], [1, 0.0, 0.5], [1, 0.0, 0.25, 7], [1, 0.0, 0.25, 7], [2**70, 0.0], [2**70, 0.0],
             [2**70 + 1, 0.0]]
    for tick, values in enumerate(ticks):
        tuples.begin(tick)
        assert lines(values, labels, texts, tuples) == lines(values), (tick, values)

    fam, again = Samples(FAMILY), Samples(FAMILY)
    fam.add(("0",), 3)
    again.add(("0",), 3)
    texts.keep(fam, "text of 3")
    assert texts.reuse(again) == "text of 3"
    again.rows[0] = (("0",), 3.0)
    assert texts.reuse(again) is None
    again.rows[0] = (("1",), 3)   # another series with the same value
    assert texts.reuse(again) is None


def test_label_tuples_are_one_object_per_series_and_forget_deleted_series():
    def series(pod: str) -> tuple[str, ...]:
        return tuple([pod, "main"])   # a new tuple each call, as a collector builds them

    tuples = LabelTuples()
    tuples.begin("tick 1")
    first = tuples(series("pod-a"))
    assert first is not series("pod-a")
    tuples.begin("tick 2")
    assert tuples(series("pod-a")) is first
    for tick in range(3, 6):   # pod-a deleted; many short-lived series come and go
        tuples.begin(tick)
        for i in range(tuples.SLACK * 2):
            tuples((f"pod-{tick}-{i}", "main"))
    tuples.begin("later")
    assert tuples(("pod-a", "main")) is not first
    assert len(tuples._kept) <= 2 * tuples.SLACK * 2 + tuples.SLACK
