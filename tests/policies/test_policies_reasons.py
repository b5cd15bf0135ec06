"""Reason codes are a contract, each with a plain-words explanation."""

from __future__ import annotations

import pytest

from policies import (
    ACTIVE,
    BATCH_LIMIT,
    HELD,
    CLOCK_STEP,
    NOT_ARCHIVED,
    NOT_ATTEMPTED,
    NO_TRIGGER,
    PREFIX,
    REASONS,
    RESERVED,
    describe_reason,
    unconsumed,
    unconsumed_group,
)


def test_reason_codes_are_the_contract():
    assert (ACTIVE, RESERVED, NO_TRIGGER, PREFIX, BATCH_LIMIT, HELD) == (
        "active",
        "reserved",
        "no-trigger",
        "prefix",
        "batch-limit",
        "held",
    )
    assert unconsumed("etl") == "unconsumed:etl"


def test_unconsumed_code_names_its_group():
    assert unconsumed_group(unconsumed("spark.job-1")) == "spark.job-1"
    assert unconsumed_group(RESERVED) is None


@pytest.mark.parametrize("code", [ACTIVE, RESERVED, NO_TRIGGER, PREFIX, BATCH_LIMIT, HELD, "unconsumed:etl"])
def test_every_code_has_a_one_line_explanation(code):
    text = describe_reason(code)
    assert text and "\n" not in text


def test_explains_which_group_needs_a_segment():
    assert "consumer group etl" in describe_reason("unconsumed:etl")


def test_every_documented_code_is_listed():
    assert set(REASONS) == {ACTIVE, RESERVED, NO_TRIGGER, "unconsumed:GROUP", PREFIX, BATCH_LIMIT, HELD,
                            NOT_ATTEMPTED, NOT_ARCHIVED, CLOCK_STEP}
    assert NOT_ATTEMPTED == "not-attempted"


def test_the_module_docstring_lists_every_code():
    # The documentation's tables are generated from REASONS (tests/test_docs.py checks the pages).
    import policies.reasons

    for code in REASONS:
        assert f"``{code}``" in policies.reasons.__doc__, code


def test_outcomes_are_defined_once_and_shared():
    import policies.reasons
    import policies.planner
    import retention
    import retention.deletion.cleaner

    for name in ("DELETE", "KEEP", "DELETED", "HUNG", "FAILED"):
        value = getattr(policies.reasons, name)
        assert getattr(policies.planner, name) is value
        for module in (retention.deletion.cleaner, retention):   # where a name is seen, it is this one
            if hasattr(module, name):
                assert getattr(module, name) is value
    assert policies.reasons.ACTIONS == ("delete", "deleted", "keep", "hung", "failed")


def test_unknown_code_is_rejected():
    with pytest.raises(ValueError, match="unknown reason code"):
        describe_reason("too-young")
