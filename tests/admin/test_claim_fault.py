"""The test-only claim-window fault point is armed only by its variable, with a number."""

from __future__ import annotations

import pytest

from jobring.admin.services.claim_fault import ENV, claim_fault_from


def test_unset_or_blank_arms_nothing() -> None:
    assert claim_fault_from({}) is None
    assert claim_fault_from({ENV: "  "}) is None


@pytest.mark.parametrize("raw", ["0", "-3", "abc", "1.5"])
def test_a_bad_value_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        claim_fault_from({ENV: raw})
