"""A filter that no task can meet by its terms alone (core.filters.TaskFilter.
never_matches) is answered without reading the ledger, so the proof must be sound:
for filters and tasks drawn at random, a filter said to match nothing matches no
task in memory either (the same test the ledger's SQL is held to in test_filters)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from core import ErrorCode, Stage, TaskStatus, parse_filter
from core.ledger.views import TaskView

# Few values, each inside or at the start of others, so that most drawn filters pair
# a value with one it holds and most tasks carry one of them.
VALUES = ("a", "0", "a0", "0a", "A0", "é", "Éa0")
HEX_VALUES = ("a", "0", "a0", "0a", "a01")
# The pattern fields most often: theirs are the proofs with cases.
PATTERN_TERMS = st.one_of(
    st.sampled_from(VALUES),
    st.sampled_from(VALUES).map(lambda w: f"name:{w}"),
    st.sampled_from(VALUES).map(lambda w: f"worker:{w}"),
    st.sampled_from(HEX_VALUES).map(lambda w: f"id:{w}"),
    st.sampled_from(HEX_VALUES).map(lambda w: f"doc:{w}"),
    st.sampled_from([f"code:{c.value}" for c in ErrorCode] + ["parse", "error", "empty"]),
)
OTHER_TERMS = st.one_of(
    st.sampled_from([f"status:{s.value}" for s in TaskStatus]),
    st.sampled_from([f"stage:{s.value}" for s in Stage]),
    st.tuples(st.sampled_from([">", ">=", "<", "<=", "="]), st.integers(0, 4)).map(
        lambda t: f"attempt:{t[0]}{t[1]}"
    ),
)
TERMS = st.one_of(PATTERN_TERMS, PATTERN_TERMS, PATTERN_TERMS, OTHER_TERMS)
FILTERS = st.lists(st.tuples(st.booleans(), TERMS), min_size=2, max_size=3).map(
    lambda terms: " ".join(("!" if negate else "") + term for negate, term in terms)
)


def _tasks() -> list[TaskView]:
    """Every combination of the values the pattern terms test (names, workers, ids,
    document ids, codes), the status, stage and attempt cycling through theirs."""
    names = (None, "", "a0", "xa0y", "Éa", "b")
    workers = (None, "a0", "é", "b")
    ids = ("af", "0af", "a0f", "a01f")
    codes = (None, ErrorCode.PARSE_ERROR, ErrorCode.EMPTY_DOCUMENT)
    states = list(itertools.product(TaskStatus, Stage, range(6)))
    combos = itertools.product(names, workers, ids, ids[:3], codes)
    return [
        TaskView(
            task_id=task_id,
            document_id=document_id,
            status=states[n * 7 % len(states)][0],
            stage=states[n * 7 % len(states)][1],
            completed=0,
            total=1,
            attempt=states[n * 7 % len(states)][2],
            error_code=code,
            error_detail=None,
            document_name=name,
            worker_id=worker,
        )
        for n, (name, worker, task_id, document_id, code) in enumerate(combos)
    ]


TASKS = _tasks()


# Every term the strategies above draw from.
EVERY_TERM = (
    *VALUES,
    *(f"name:{v}" for v in VALUES),
    *(f"worker:{v}" for v in VALUES),
    *(f"id:{v}" for v in HEX_VALUES),
    *(f"doc:{v}" for v in HEX_VALUES),
    *(f"code:{c.value}" for c in ErrorCode),
    "parse",
    "error",
    "empty",
    *(f"status:{s.value}" for s in TaskStatus),
    *(f"stage:{s.value}" for s in Stage),
    *(f"attempt:{op}{n}" for op in (">", ">=", "<", "<=", "=") for n in range(5)),
)


def test_no_pair_of_terms_said_to_match_nothing_matches_a_task() -> None:
    """Every pair of terms, each negated or not: the proofs are about pairs."""
    signed = [sign + term for term in EVERY_TERM for sign in ("", "!")]
    claimed = 0
    for first, second in itertools.combinations(signed, 2):
        flt = parse_filter(f"{first} {second}")
        if flt.never_matches:
            claimed += 1
            assert not [t for t in TASKS if flt.matches(t)], flt.text
    assert claimed > 100  # the pairs hold contradictions to check


@settings(max_examples=1000, deadline=None)
@given(FILTERS)
def test_a_filter_said_to_match_nothing_matches_no_task(text: str) -> None:
    flt = parse_filter(text)
    if flt.never_matches:
        assert not [t for t in TASKS if flt.matches(t)], text


def test_the_contradictions_are_found() -> None:
    for text in (
        "name:report !name:rep",
        "report !rep",
        "name:Report !REP",
        "id:3f2a !3f",
        "code:parse_error !parse",
        "worker:w1 !worker:W",
        "doc:91ab !doc:91",
        "status:failed !status:failed",
        "attempt:>3 attempt:<2",
        "attempt:=2 attempt:=3",
        "attempt:>=2 attempt:<=3 !attempt:=2 !attempt:=3",
        "attempt:<0",
    ):
        assert parse_filter(text).never_matches, text
    for text in (
        "name:rep !name:report",
        "report !name:report-q",
        "id:3f !id:3f2a",
        "attempt:>=2 attempt:<=3 !attempt:=2",
        "attempt:>1000000",
        "status:failed !code:parse_error",
        "ocr:low !ocr:low",  # page terms are the ledger's to decide
    ):
        assert not parse_filter(text).never_matches, text
