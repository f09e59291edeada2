"""The /metrics text of exporter/exposition.py, value by value."""
from __future__ import annotations

import math

from slicemeter.exporter.catalogue import Family
from slicemeter.exporter.exposition import LabelText, Samples, render

FAMILY = Family("slicemeter_test_ratio", "gauge", "test", ("slice",), "slice")


def lines(values: list, labels: LabelText | None = None) -> list[str]:
    fam = Samples(FAMILY)
    for i, v in enumerate(values):
        fam.add((str(i),), v)
    return render([fam], labels).splitlines()[2:]


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
