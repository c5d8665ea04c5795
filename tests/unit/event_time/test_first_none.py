"""The map operator's None check (issue 18 item 12): by identity, fast on truthy records,
correct on falsy ones and on records whose truth is undefined (arrays)."""

from __future__ import annotations

import numpy as np

from lockgate.runtime.operators.basic import first_none


def test_first_none_finds_none_by_identity_among_any_records() -> None:
    assert first_none([{"a": 1}, (1,), "x"]) == -1
    assert first_none([0, "", {}, [], 0.0]) == -1, "falsy records are not None"
    assert first_none([{}, 0, None, None]) == 2
    assert first_none([np.array([1, 2]), np.array([3, 4])]) == -1
    assert first_none([np.array([1, 2]), None]) == 1, "an array's undefined truth is no error"
    assert first_none([]) == -1
