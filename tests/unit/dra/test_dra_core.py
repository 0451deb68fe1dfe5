"""The DRA core's own example (kdra.dra's docstring) runs as written: a claim allocated
against a slice with no cluster, and not allocated again once its device is taken."""

import doctest

import kdra.dra


def test_the_core_docstring_example_allocates_a_claim_without_a_cluster() -> None:
    outcome = doctest.testmod(kdra.dra, optionflags=doctest.ELLIPSIS)
    assert outcome.failed == 0
    assert outcome.attempted >= 9  # every example line ran (none silently skipped)
