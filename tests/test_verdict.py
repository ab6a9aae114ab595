"""The verdict of a group (`redis_presence.verdict.judge`): every verdict, every rule's
boundary, and the properties that hold whatever the facts (docs/concepts.md's tables)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_presence.verdict import VERDICTS, GroupFacts, Verdict, judge

OK, DRAINING, DEGRADED, STALLED, STOPPED = VERDICTS

# (facts, verdict, words the reason must hold); one row per verdict and per boundary.
CASES = [
    # OK: at (or above) the minimum, nothing stale, nothing stuck.
    (GroupFacts(1, 0, 0), OK, "1 active"),
    (GroupFacts(2, 0, 0, min_active=2), OK, "2 active, at least 2 wanted"),
    (GroupFacts(3, 0, 5, min_active=2), OK, "3 active"),  # expired: outside the window
    (GroupFacts(2, 0, 0, stuck=0), OK, "2 active"),
    (GroupFacts(2, 0, 0, draining_active=0, draining_stale=0), OK, "2 active"),
    (GroupFacts(2, 0, 0, capacity=8, leases=3), OK, "3 of 8 slots in use"),
    (GroupFacts(2, 0, 0, capacity=8, leases=8), OK, "8 of 8 slots in use"),  # busy, not unwell
    # DEGRADED: one below the minimum (the boundary: wanted - 1).
    (GroupFacts(1, 0, 0, min_active=2), DEGRADED, "below its minimum: 1 active, at least 2"),
    # ... some stale (one is enough), with or without the minimum.
    (GroupFacts(1, 1, 0), DEGRADED, "1 consumer stale"),
    (GroupFacts(3, 2, 0, min_active=2), DEGRADED, "2 consumers stale"),
    # ... some stuck, not all (all is STALLED).
    (GroupFacts(2, 0, 0, stuck=1), DEGRADED, "1 of 2 active stuck"),
    # ... every fault at once, each named.
    (
        GroupFacts(2, 1, 0, min_active=3, stuck=1),
        DEGRADED,
        "below its minimum: 2 active, at least 3 wanted; 1 consumer stale",
    ),
    # ... a stale consumer that said it was draining excuses one missing, not two.
    (
        GroupFacts(1, 1, 0, min_active=3, draining_stale=1),
        DEGRADED,
        "below its minimum: 1 active, at least 3 wanted",
    ),
    # ... a stale consumer that did not say so, beside one that did.
    (GroupFacts(2, 2, 0, draining_stale=1), DEGRADED, "1 consumer stale"),
    # STALLED: every active consumer stuck (one, or all of many).
    (GroupFacts(1, 0, 0, stuck=1), STALLED, "the only active consumer is stuck"),
    (GroupFacts(3, 0, 0, stuck=3), STALLED, "all 3 active are stuck"),
    # ... and worse than below the minimum, or stale.
    (GroupFacts(2, 1, 0, min_active=4, stuck=2), STALLED, "alive but not progressing"),
    # STOPPED: nobody active, whatever else.
    (GroupFacts(0, 0, 0), STOPPED, "nobody reading: no consumer"),
    (GroupFacts(0, 0, 0, min_active=2), STOPPED, "no consumer, at least 2 wanted"),
    (GroupFacts(0, 1, 0), STOPPED, "0 active (1 stale)"),
    (GroupFacts(0, 0, 3), STOPPED, "0 active (3 expired)"),
    (GroupFacts(0, 2, 1, min_active=1, stuck=0), STOPPED, "0 active (2 stale, 1 expired)"),
    # ... also when the stale ones that drained are fewer than those missing.
    (GroupFacts(0, 1, 0, min_active=2, draining_stale=1), STOPPED, "nobody reading"),
    # ... and a draining row that has expired is outside the window: it excuses nothing.
    (GroupFacts(0, 0, 1, draining_stale=0), STOPPED, "0 active (1 expired)"),
    # DRAINING: a consumer says it is leaving, the group is otherwise OK.
    (GroupFacts(2, 0, 0, draining_active=1), DRAINING, "planned departure: 1 consumer draining"),
    (GroupFacts(2, 0, 0, min_active=2, draining_active=2), DRAINING, "2 consumers draining"),
    # ... or it left on purpose within the window: the shortfall it leaves is excused.
    (
        GroupFacts(2, 1, 0, min_active=3, draining_stale=1),
        DRAINING,
        "1 consumer left on purpose; 2 active, at least 3 wanted",
    ),
    (GroupFacts(0, 1, 0, draining_stale=1), DRAINING, "1 consumer left on purpose; 0 active"),
    (GroupFacts(3, 1, 0, min_active=3, draining_stale=1), DRAINING, "left on purpose"),
    # ... never when a fault is there too.
    (GroupFacts(2, 0, 0, stuck=1, draining_active=1), DEGRADED, "1 of 2 active stuck"),
]


@pytest.mark.parametrize(("facts", "verdict", "words"), CASES)
def test_each_verdict_and_boundary(facts: GroupFacts, verdict: Verdict, words: str) -> None:
    judged = judge(facts)
    assert judged.verdict is verdict, judged
    assert words in judged.reason, judged


def test_every_verdict_is_reached() -> None:
    assert {verdict for _, verdict, _ in CASES} == set(Verdict)


def test_order_names_and_probes() -> None:
    assert [v.value for v in VERDICTS] == ["OK", "DRAINING", "DEGRADED", "STALLED", "STOPPED"]
    assert [v.severity for v in VERDICTS] == [0, 1, 2, 3, 4]
    assert [v.passes for v in VERDICTS] == [True, True, False, False, False]
    assert str(Verdict.STALLED) == "STALLED"
    assert judge(GroupFacts(1, 0, 0)).to_dict() == {"verdict": "OK", "reason": "1 active"}


counts = st.integers(0, 6)
maybe = st.none() | counts


@st.composite
def facts(draw: st.DrawFn) -> GroupFacts:
    active, stale, expired = draw(counts), draw(counts), draw(counts)
    stuck = draw(st.none() | st.integers(0, active))
    d_active = draw(st.none() | st.integers(0, active))
    d_stale = draw(st.none() | st.integers(0, stale))
    capacity = draw(maybe)
    return GroupFacts(
        active,
        stale,
        expired,
        draw(st.none() | st.integers(1, 8)),
        stuck,
        d_active,
        d_stale,
        capacity,
        None if capacity is None else draw(counts),
    )


@given(facts())
def test_what_a_read_does_not_know_cannot_decide(f: GroupFacts) -> None:
    """Without progress, never STALLED; without draining, never DRAINING; capacity never
    changes the verdict."""
    verdict = judge(f).verdict
    if f.stuck is None:
        assert verdict is not STALLED
    if not f.draining_active and not f.draining_stale:
        assert verdict is not DRAINING
        assert judge(f._replace(draining_active=None, draining_stale=None)).verdict is verdict
    assert judge(f._replace(capacity=None, leases=None)).verdict is verdict


@given(facts())
def test_stopped_is_nobody_reading_and_passing_is_no_fault(f: GroupFacts) -> None:
    judged = judge(f)
    assert (judged.verdict is STOPPED) == (f.active == 0 and judged.verdict is not DRAINING)
    wanted = 1 if f.min_active is None else f.min_active
    excused = f.draining_stale or 0
    no_fault = (
        f.active + excused >= wanted
        and f.stale == (f.draining_stale or 0)
        and not f.stuck
        and (f.active > 0 or excused > 0)
    )
    assert judged.verdict.passes == no_fault, judged
    assert judged.reason


@given(facts(), st.integers(1, 3))
def test_more_faults_never_improve_the_verdict(f: GroupFacts, n: int) -> None:
    """A consumer gone stale without draining, or one more stuck, never makes it better;
    one more active consumer that is not stuck never makes it worse."""
    before = judge(f).verdict.severity
    assert judge(f._replace(stale=f.stale + n)).verdict.severity >= before
    if f.stuck is not None and f.stuck + n <= f.active:
        assert judge(f._replace(stuck=f.stuck + n)).verdict.severity >= before
    better = judge(f._replace(active=f.active + n)).verdict
    assert better.severity <= before or better is DRAINING


def test_a_row_with_below_agrees() -> None:
    """`below` (fewer active than the minimum) and no draining: never a passing verdict."""
    for active in range(4):
        for least in range(1, 4):
            judged = judge(GroupFacts(active, 0, 0, least))
            assert judged.verdict.passes == (active >= least)


def test_the_table_of_docs_concepts_is_the_rule() -> None:
    """Each row of docs/concepts.md's table of inputs gives the verdict it says."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "concepts.md").read_text(encoding="utf-8")
    table = text.split("The inputs of each verdict", 1)[1].split("**Where it is read.**", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 10
    for line in rows:
        active, stale, expired, stuck, draining, said = (c.strip() for c in line.split("|")[1:-1])
        wanted = re.search(r"`wanted` (\d+)", draining)
        pair = re.match(r"\((\d+), (\d+)\)", draining)
        d_active, d_stale = (int(pair[1]), int(pair[2])) if pair else (None, None)
        verdict = Verdict(re.match(r"`(\w+)`", said)[1])  # type: ignore[index]
        for n_expired in (0, 5) if expired == "any" else (int(expired),):
            for n_stuck in (
                (0, None) if stuck == "0 or -" else (None if stuck == "-" else int(stuck),)
            ):
                facts = GroupFacts(
                    int(active),
                    int(stale),
                    n_expired,
                    int(wanted[1]) if wanted else 2,
                    n_stuck,
                    d_active,
                    d_stale,
                )
                assert judge(facts).verdict is verdict, (line, facts, judge(facts))
