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


def test_a_broken_promise_is_named_first_and_alone_however_many_runs_the_promises_allow():
    said = delivery_sentences([ALLOWED_LOSS, row("crash", "primer", "sim"), INVALID_LOSS])
    assert said[0] == ("kestrel broke its promises under crash in the live world (verdict INVALID): lost 3 "
                       "acknowledged messages that no fault explains (the run's faults: crash).")
    assert "kestrel" not in " ".join(said[1:])  # not also one item of the list of allowed losses
    assert said[1] == ("Under crash, queuefka lost acknowledged messages, as its promises allow: 488 sim "
                       "(fsync=never loses the unsynced tail).")
    assert said[2] == "The other run lost and duplicated nothing."  # and no "no run broke a promise": one did


def test_allowed_losses_are_grouped_per_workload_with_both_worlds_and_the_allowance_once():
    kestrel = "syncJournal=never loses the unsynced tail"
    rows = [row("crash", "ideal", "sim", lost=461, verdict="allowed",
                reason="lost 461 acknowledged messages under crash: allowed, in memory: a crash loses everything"),
            row("crash", "kestrel", "sim", lost=873, verdict="allowed",
                reason=f"lost 873 acknowledged messages under crash: allowed, {kestrel}"),
            row("crash", "kestrel", "live", lost=1312, verdict="allowed",
                reason=f"lost 1312 acknowledged messages under crash: allowed, {kestrel}"),
            row("crash", "primer", "sim", lost=2406, verdict="allowed", inversions=6504,
                reason="lost 2406 acknowledged messages under crash: allowed, persistence=off: a crash loses it; "
                       "6504 inversions of the real-time order (no order promised)"),
            row("crash", "primer", "live", lost=852, verdict="allowed", inversions=284,
                reason="lost 852 acknowledged messages under crash: allowed, persistence=off: a crash loses it; "
                       "284 inversions of the real-time order (no order promised)"),
            row("steady", "kestrel", "sim")]
    assert delivery_sentences(rows) == [
        "Under crash, three designs lost acknowledged messages, each as its promises allow: ideal 461 sim (in memory: "
        f"a crash loses everything), kestrel 873 sim and 1,312 live ({kestrel}), primer 2,406 sim and 852 live "
        "(persistence=off: a crash loses it; 6,504 sim and 284 live inversions of the real-time order, no order "
        "promised).",
        "The other run lost and duplicated nothing, and no run broke its design's promises."]


def test_worlds_that_give_different_reasons_each_keep_theirs_and_an_odd_reason_is_said_whole():
    odd = "lost 5 acknowledged messages, a reason in words this answer does not parse"
    said = delivery_sentences([ALLOWED_LOSS, row("crash", "queuefka", "live", lost=5, verdict="allowed", reason=odd)])
    assert said[0] == ("Under crash, queuefka lost acknowledged messages, as its promises allow: 488 sim (fsync=never "
                       f"loses the unsynced tail) and 5 live ({odd}).")


def test_duplicates_within_promises_and_order_only_allowances_are_brief_per_workload():
    order = ("after a consumer's connection broke: allowed, records fetched by a reader whose connection closed "
             "are handed out again")
    said = delivery_sentences([VALID_DUPLICATE, row("net-split", "queuefka", "sim", inversions=75, verdict="allowed",
                                                    reason=f"75 inversions of the real-time order {order}"),
                               row("net-split", "queuefka", "live", inversions=10600, verdict="allowed",
                                   reason=f"10600 inversions of the real-time order {order}"),
                               row("steady", "ideal", "sim"), row("steady", "ideal", "live")])
    assert said == [
        "Under net-split, cassieq delivered duplicates, within its promises: 1 sim (after a lease of 2 s ran out "
        "unacknowledged).",
        "Under net-split, queuefka delivered out of the real-time order, as its promises allow: 75 sim and 10,600 "
        "live inversions (after a consumer's connection broke: records fetched by a reader whose connection closed "
        "are handed out again).",
        "The other 2 runs lost and duplicated nothing, and no run broke its design's promises."]


def test_a_broken_promise_without_loss_is_still_named():
    [said] = delivery_sentences([row("steady", "kestrel", "sim", verdict="invalid",
                                     reason="8 puts refused with no fault in the run")])
    assert said == ("kestrel broke its promises under steady in the sim world (verdict INVALID): 8 puts refused with "
                    "no fault in the run.")


def test_nothing_lost_anywhere_is_one_sentence():
    assert delivery_sentences([row("steady", "kestrel", "sim"), row("steady", "kestrel", "live")]) == [
        "No design lost or duplicated an acknowledged message in any of the 2 runs, and every verdict is valid."]
    assert delivery_sentences([row("steady", "kestrel", "sim")]) == [
        "No design lost or duplicated an acknowledged message in the one run, and its verdict is valid."]


def test_one_workload_names_each_percentiles_winner_and_leaves_the_control_aside():
    rows = [row("steady", "ideal", "sim", 100_000, 200_000), row("steady", "kestrel", "sim", 245_331, 514_210),
            row("steady", "queuefka", "sim", 344_681, 400_000),
            row("steady", "ideal", "live", 90_000, 100_000), row("steady", "kestrel", "live", 221_983, 579_773),
            row("steady", "queuefka", "live", 412_660, 1_924_991)]
    assert speed_sentences(rows) == [
        "The fastest put in the sim world, the control ideal aside: in steady, kestrel at p50 (245 µs) and queuefka "
        "at p99 (400 µs).",
        "The fastest put in the live world, the control ideal aside: in steady, kestrel at p50 (222 µs) and at p99 "
        "(580 µs)."]


def sweep(world: str, **beaten: tuple[str, float, float]) -> list[dict[str, Any]]:
    """kestrel fastest on four workloads unless ``beaten`` gives a workload's (design, p50, p99)."""
    rows = []
    for i, workload in enumerate(("crash", "gc-pause", "net-split", "steady")):
        rows += [row(workload, "ideal", world, 100_000, 200_000),
                 row(workload, "kestrel", world, (245_000, 320_000, 350_000, 396_000)[i],
                     (525_000, 603_000, 640_000, 680_000)[i]),
                 row(workload, "queuefka", world, 900_000, 4_000_000)]
        if workload in beaten:
            rows[-1] = row(workload, *beaten[workload][:1], world, *beaten[workload][1:])
    return rows


def test_one_sentence_per_world_when_a_design_wins_every_workload_with_the_range_of_its_figures():
    [said, _] = speed_sentences(sweep("sim"))
    assert said == ("In the sim world kestrel put fastest on every workload (p50 245–396 µs, p99 525–680 µs), "
                    "the control ideal aside.")


def test_only_the_workloads_and_percentiles_the_leader_did_not_win_are_named():
    rows = sweep("live", crash=("queuefka", 200_000, 300_000), steady=("queuefka", 900_000, 600_000))
    assert speed_sentences(rows)[1] == (
        "In the live world kestrel put fastest (p50 320–396 µs, p99 603–640 µs), the control ideal aside, except "
        "crash (queuefka, p50 200 µs and p99 300 µs) and p99 of steady (queuefka, 600 µs).")


def test_without_a_leader_every_workload_is_named():
    rows = sweep("sim", crash=("queuefka", 200_000, 300_000), steady=("primer", 200_000, 300_000))
    assert speed_sentences(rows)[0] == (
        "The fastest put in the sim world, the control ideal aside: in crash, queuefka at p50 (200 µs) and at p99 "
        "(300 µs); in gc-pause, kestrel at p50 (320 µs) and at p99 (603 µs); in net-split, kestrel at p50 (350 µs) "
        "and at p99 (640 µs); in steady, primer at p50 (200 µs) "
        "and at p99 (300 µs).")


def test_a_tie_with_the_leader_is_an_exception_that_names_both():
    rows = sweep("live", steady=("queuefka", 900_000, 680_200))  # 680.0 and 680.2 µs both print as 680 µs
    assert speed_sentences(rows)[1] == (
        "In the live world kestrel put fastest (p50 245–396 µs, p99 525–640 µs), the control ideal aside, except "
        "p99 of steady (kestrel and queuefka, 680 µs each).")


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
    assert answer.startswith("Under crash, queuefka lost acknowledged messages, as its promises allow: 488 sim")
    assert answer.endswith(
        " The other 2 runs lost and duplicated nothing, and no run broke its design's promises. "
        "The fastest put in the sim world: in crash, queuefka at p50 (300 µs) and at p99 (900 µs). "
        "The fastest put in the live world: in crash, kestrel at p50 (300 µs) and at p99 (900 µs).")
    assert "\n" not in answer and "|" not in answer and "**" not in answer


def test_an_empty_table_has_an_answer_that_says_so():
    assert compare_answer([]) == "The comparison ran nothing, so there is no answer."
