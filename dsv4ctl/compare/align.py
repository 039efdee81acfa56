"""GOOD and BAD lined up: each fact's relation, where the timelines part, and the explicit-length question.

A fact one log lacks is "only in GOOD's/BAD's log", never equal and never a default; only the launch arguments,
which vLLM logs in full as `non-default args` (a flag missing there is at its default), can be "added" or
"removed" when both logs have that line.
"""

from __future__ import annotations

from dsv4ctl.compare.facts import CATEGORIES, facts_of, shows_args
from dsv4ctl.compare.model import Difference, PairAnswer, Parting, PhaseMark, Seen, StartRead
from dsv4ctl.diagnosis.checklist import CHECKLIST_QUESTIONS
from dsv4ctl.logs.timeline import StartupTimeline

PHASE_NAMES = {
    "starting": "starting", "loading_weights": "loading weights", "weights_loaded": "weights loaded",
    "profiling": "profiling", "kv_cache": "KV cache", "capturing": "capturing CUDA graphs", "ready": "ready",
    "failed": "failed", "shutdown": "shutdown",
}


def relate(name: str, good: Seen | None, bad: Seen | None, args_shown: tuple[bool, bool]) -> str | None:
    """same | changed | added | removed | only in GOOD's log | only in BAD's log (None: neither log shows it)."""
    if good is None and bad is None:
        return None
    if good is not None and bad is not None:
        return "same" if good.value == bad.value else "changed"
    if name.startswith("--") and all(args_shown):
        return "added" if good is None else "removed"
    return "only in BAD's log" if good is None else "only in GOOD's log"


def align(good: StartRead, bad: StartRead) -> list[Difference]:
    """Every fact either start shows, related."""
    g, b = facts_of(good), facts_of(bad)
    shown = (shows_args(good), shows_args(bad))
    out = []
    for name in [*g, *(n for n in b if n not in g)]:
        category = (g.get(name) or b.get(name))[0]
        gs, bs = (g.get(name) or (category, None))[1], (b.get(name) or (category, None))[1]
        status = relate(name, gs, bs, shown)
        if status is not None:
            out.append(Difference(name, category, status, gs, bs))
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(out, key=lambda d: order[d.category])


def _name(phase: str) -> str:
    return PHASE_NAMES.get(phase, phase)


def parting(good: StartRead, bad: StartRead) -> Parting:
    """The first point where the phase sequences differ: the phase BAD failed in (or last reached) that GOOD passed."""
    gs, bs = good.phases, bad.phases
    i = 0
    while i < len(gs) and i < len(bs) and gs[i].phase == bs[i].phase:
        i += 1
    last: PhaseMark | None = bs[i - 1] if i else None
    at = _name(last.phase) if last else "the start"
    if i == len(gs) and i == len(bs):
        return Parting(last.phase if last else None, "the two timelines reach the same phases"
                       + (f" (last: {at})" if last else ""))
    g_next = gs[i] if i < len(gs) else None
    b_next = bs[i] if i < len(bs) else None
    good_went = f"GOOD went on to {_name(g_next.phase)} (line {g_next.line})" if g_next else "GOOD's log ends there"
    if b_next is not None and b_next.phase == "failed":
        # The last phase BAD's log marks, not the phase it failed in: a phase vLLM logs no line for (the KV cache
        # with --kv-cache-memory-bytes) may have begun since.
        since = f"after {at} (line {last.line}), the last phase its log marks" if last else "before any phase its log marks"
        text = f"BAD failed (line {b_next.line}) {since}; {good_went}"
    elif b_next is None:
        text = f"BAD's log ends in {at}; {good_went}"
    else:
        text = f"after {at}, BAD went to {_name(b_next.phase)} (line {b_next.line}); {good_went}"
    return Parting(last.phase if last else None, text, g_next.line if g_next else None,
                   b_next.line if b_next else None)


def _explicit(tl: StartupTimeline) -> str | None:
    """The explicit --max-model-len a launch gave (None: none, or auto / -1)."""
    value = tl.serve_args.get("max_model_len") if tl.serve_args else tl.max_model_len_arg
    if value is None or str(value).strip("'").lower() in ("-1", "auto"):
        return None
    return str(value)


def _line(tl: StartupTimeline, key: str) -> str:
    ref = tl.refs.get(key)
    return f" (line {ref.line})" if ref else ""


def explicit_length(good: StartRead, bad: StartRead) -> PairAnswer:
    """Checklist question 5 across the pair: yes when GOOD gave an explicit length that BAD lacked and GOOD reached
    ready; otherwise what the pair does not show."""
    q = CHECKLIST_QUESTIONS[4]
    gt, bt = good.diagnosis.timeline, bad.diagnosis.timeline
    if not shows_args(good) or not shows_args(bad):
        which = " and ".join(s.label for s in (good, bad) if not shows_args(s))
        return PairAnswer(q, "not shown", f"{which}'s log has no non-default args line: the length given is not in it")
    g, b = _explicit(gt), _explicit(bt)
    if g is None:
        how = f"--max-model-len {b}" if b else "no explicit length"
        return PairAnswer(q, "not shown", f"GOOD gave no explicit --max-model-len{_line(gt, 'nondefault_args')} "
                                          f"(BAD: {how}): compare a start with an explicit length")
    if b is not None:
        return PairAnswer(q, "not shown", f"both gave an explicit length: GOOD --max-model-len {g}, BAD {b}")
    if not gt.ready:
        return PairAnswer(q, "no", f"GOOD gave --max-model-len {g}{_line(gt, 'nondefault_args')} and did not reach "
                                   f"ready either")
    ready = f" (line {gt.ready_ref.line})" if gt.ready_ref else ""
    return PairAnswer(q, "yes", f"GOOD gave --max-model-len {g}{_line(gt, 'nondefault_args')} and reached "
                                f"ready{ready}; BAD gave none{_line(bt, 'nondefault_args')} and "
                                f"{'failed' if bad.verdict == 'failed' else 'ended ' + bad.verdict}")
