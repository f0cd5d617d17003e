"""The CLI tables' one number format."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.cli.tables import number


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (25972, "25,972"),
        (np.int64(2385), "2,385"),
        (0.58163, "0.5816"),
        (np.float64(174.12), "174.1"),
        (23976.4, "23,976"),
        (300.0, "300"),
        (0.0, "0"),
        (3e-6, "3.00e-06"),
        (None, "-"),
        (float("nan"), "-"),
        (True, "True"),
        ("stream", "stream"),
    ],
)
def test_number_reads_one_way_everywhere(value: object, text: str) -> None:
    assert number(value) == text
