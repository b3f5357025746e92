"""The comparison's answer in words (``lab.present.answer``), on small tables made by hand: each
test asserts the sentence that could say the wrong thing."""

from __future__ import annotations

from typing import Any

from lab.present.answer import compare_answer, delivery_sentences, speed_sentences


def row(workload: str, backend: str, world: str, p50: float | None = 300_000.0, p99: float | None = 900_000.0,
        lost: int = 0, duplicated: int = 0, verdict: str = "valid", reason: str = "", **rest: Any) -> dict[str, Any]:
    return {"workload": workload, "backend": backend, "world": world, "put_p50_ns": p50, "put_p99_ns": p99,
            "lost": lost, "duplicated": duplicated, "unexpected": 0, "inversions": 0, "verdict": verdict,
            "reason": reason, **rest}


ALLOWED_LOSS = row("crash", "queuefka", "sim", lost=488, verdict="allowed",
                   reason="lost 488 acknowledged messages under crash: allowed, fsync=never loses the unsynced tail")
INVALID_LOSS = row("crash", "kestrel", "live", lost=3, verdict="invalid",
                   reason="lost 3 acknowledged messages that no fault explains (the run's faults: crash)")
VALID_DUPLICATE = row("net-split", "cassieq", "sim", duplicated=1,
                      reason="1 duplicate delivery after a lease of 2 s ran out unacknowledged")


def test_an_allowed_loss_reads_as_allowed_and_a_broken_promise_as_broken():
    allowed, broken, rest = delivery_sentences([ALLOWED_LOSS, INVALID_LOSS, row("crash", "primer", "sim")])
    assert allowed == ("In crash, queuefka (sim world) lost 488 acknowledged messages, which its promises allow under "
                       "that fault (verdict allowed: lost 488 acknowledged messages under crash: allowed, fsync=never "
                       "loses the unsynced tail).")
    assert broken == ("In crash, kestrel (live world) lost 3 acknowledged messages, which breaks its promises (verdict "
                      "INVALID: lost 3 acknowledged messages that no fault explains (the run's faults: crash)).")
    assert rest == "The other run lost and duplicated nothing."  # and no "no run broke a promise": one did


def test_a_duplicate_within_at_least_once_is_valid_and_no_promise_broken():
    said = delivery_sentences([VALID_DUPLICATE, ALLOWED_LOSS, row("steady", "ideal", "sim"),
                               row("steady", "ideal", "live")])
    assert said[0] == ("In net-split, cassieq (sim world) delivered 1 duplicate, within its promises (verdict valid: "
                       "1 duplicate delivery after a lease of 2 s ran out unacknowledged).")
    assert said[2:] == ["The other 2 runs lost and duplicated nothing.", "No run broke its design's promises."]


def test_a_broken_promise_without_loss_is_still_named():
    [said] = delivery_sentences([row("steady", "kestrel", "sim", verdict="invalid",
                                     reason="8 puts refused with no fault in the run")])
    assert said == ("In steady, kestrel (sim world) lost and duplicated nothing, which breaks its promises "
                    "(verdict INVALID: 8 puts refused with no fault in the run).")


def test_nothing_lost_anywhere_is_one_sentence():
    assert delivery_sentences([row("steady", "kestrel", "sim"), row("steady", "kestrel", "live")]) == [
        "No design lost or duplicated an acknowledged message in any of the 2 runs, and every verdict is valid."]
    assert delivery_sentences([row("steady", "kestrel", "sim")]) == [
        "No design lost or duplicated an acknowledged message in the one run, and its verdict is valid."]


def test_the_fastest_per_world_and_workload_leaves_the_control_aside():
    rows = [row("steady", "ideal", "sim", 100_000, 200_000), row("steady", "kestrel", "sim", 245_331, 514_210),
            row("steady", "queuefka", "sim", 344_681, 400_000),
            row("steady", "ideal", "live", 90_000, 100_000), row("steady", "kestrel", "live", 221_983, 579_773),
            row("steady", "queuefka", "live", 412_660, 1_924_991)]
    assert speed_sentences(rows) == [
        "The fastest put in the sim world, the control ideal aside: in steady, kestrel at p50 (245 µs) and queuefka "
        "at p99 (400 µs).",
        "The fastest put in the live world, the control ideal aside: in steady, kestrel at p50 (222 µs) and at p99 "
        "(580 µs)."]


def test_a_tie_as_the_table_prints_it_names_both():
    # 245.3 and 245.4 µs both print as 245 µs: the reader sees a tie, so the answer says one
    rows = [row("steady", "kestrel", "sim", 245_300, 500_000), row("steady", "primer", "sim", 245_400, 600_000),
            row("steady", "queuefka", "sim", 300_000, 700_000)]
    [said, _] = speed_sentences(rows)
    assert said == ("The fastest put in the sim world: in steady, kestrel and primer at p50 (245 µs each) and "
                    "kestrel at p99 (500 µs).")


def test_a_missing_world_and_a_world_without_puts_are_said():
    rows = [row("steady", "kestrel", "sim", None, None)]
    assert speed_sentences(rows) == ["No put completed in the sim world's measured phases.",
                                     "Nothing ran in the live world."]


def test_only_the_control_is_named_when_it_ran_alone():
    [said, _] = speed_sentences([row("steady", "ideal", "sim", 209_056, 484_264)])
    assert said == "The fastest put in the sim world: in steady, ideal at p50 (209 µs) and at p99 (484 µs)."


def test_the_paragraph_is_plain_text_with_delivery_first():
    rows = [ALLOWED_LOSS, row("crash", "kestrel", "sim", 1_500_000, 9_000_000), row("crash", "kestrel", "live")]
    answer = compare_answer(rows)
    assert answer.startswith("In crash, queuefka (sim world) lost 488")
    assert answer.endswith(
        " The other 2 runs lost and duplicated nothing. No run broke its design's promises. "
        "The fastest put in the sim world: in crash, queuefka at p50 (300 µs) and at p99 (900 µs). "
        "The fastest put in the live world: in crash, kestrel at p50 (300 µs) and at p99 (900 µs).")
    assert "\n" not in answer and "|" not in answer and "**" not in answer


def test_an_empty_table_has_an_answer_that_says_so():
    assert compare_answer([]) == "The comparison ran nothing, so there is no answer."
