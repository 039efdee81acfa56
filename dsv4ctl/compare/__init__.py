"""`dsv4ctl diff GOOD BAD`: two starts aligned, the differences that matter ranked by how they bear on BAD's failure.

Inputs -> `read.read_start` (each side diagnosed as `diagnose` does, its start read line by line) -> `align` (every
fact, its relation, where the timelines part, the explicit-length question across the pair) -> `rank` -> the
`Comparison` (dataclasses, `to_json()`). Pure of output: nothing here prints or exits.
"""

from __future__ import annotations

from dsv4ctl.advice import safe_length_from_log
from dsv4ctl.compare.align import align, explicit_length, parting
from dsv4ctl.compare.model import DEFAULT, NOT_IN_LOG, Comparison, Difference, PairAnswer, Parting, PhaseMark, Seen, StartRead
from dsv4ctl.compare.rank import STALE, rank
from dsv4ctl.compare.read import read_start
from dsv4ctl.compare.spec import StartSpec, parse_pair, parse_spec


def compare(good: StartSpec, bad: StartSpec, stdin: bytes | None = None) -> Comparison:
    """GOOD and BAD read (stdin's bytes for the side given as `-`), aligned and ranked."""
    g = read_start(good, "GOOD", stdin if good.path == "-" else None)
    b = read_start(bad, "BAD", stdin if bad.path == "-" else None)
    return compare_reads(g, b)


def compare_reads(g: StartRead, b: StartRead) -> Comparison:
    facts = align(g, b)
    rank(facts, b)
    pin = _pin_length(b)
    c = Comparison(g, b, facts, parting(g, b), explicit_length(g, b), "", pin, _notes(g, b))
    c.headline = _headline(c)
    return c


def _pin_length(b: StartRead) -> int | None:
    """For a stale-length failure, the explicit length advice plans from BAD's own figures (the finding's safe length,
    else `safe_length_from_log` at its auto-fit length)."""
    rc, tl = b.diagnosis.root_cause, b.diagnosis.timeline
    if rc is None or rc.id != STALE:
        return None
    safe = rc.details.get("safe_len")
    if not safe and tl.autofit is not None:
        safe = safe_length_from_log(tl, tl.autofit.to_len).length or None
    return safe or None


def _notes(g: StartRead, b: StartRead) -> list[str]:
    notes = []
    if g.verdict != "healthy":
        notes.append(f"GOOD did not reach a healthy end ({g.verdict}): {g.diagnosis.summary}")
    if b.verdict == "healthy":
        notes.append("BAD shows no failure: the differences bear on no failure")
    if g.source == b.source and g.number == b.number:
        notes.append("GOOD and BAD are the same start")
    return notes


def _headline(c: Comparison) -> str:
    b, diffs = c.bad, c.differences
    rc = b.diagnosis.root_cause
    if rc is not None and rc.id == STALE and diffs and diffs[0].name == "auto-fit":
        d = diffs[0]
        release = ""
        if rc.details.get("version_status") == "affected":
            release = (f"; vLLM {rc.details.get('vllm_version')} has the bug ({rc.details.get('affected')}, fixed in "
                       f"{rc.details.get('fixed')})")
        good = d.good.value if d.good else NOT_IN_LOG
        mem = next((f for f in c.facts if f.name == "available KV cache memory"), None)
        g_mem, b_mem = (f" at {value_of(mem, mem.good)}", f" at {value_of(mem, mem.bad)}") if mem else ("", "")
        pin = f". Pin --max-model-len {c.pin_length}" if c.pin_length else ""
        return (f"BAD failed with the stale max_model_len after auto-fit{release}: auto-fit {d.bad.value} in BAD"
                f"{b_mem}; GOOD: {good}{g_mem}{pin}.")
    what = f"BAD ended {b.verdict}."
    if b.verdict == "failed":
        where = f" (line {rc.line})" if rc is not None and rc.line else ""
        what = f"BAD failed: {rc.title}{where}." if rc is not None else "BAD failed; the cause is not in its log."
    if not diffs:
        return f"{what} The two starts show no difference in what dsv4ctl compares."
    first = diffs[0]
    return f"{what} First difference: {first.name}: {value_of(first, first.good)} -> {value_of(first, first.bad)}."


def value_of(d: Difference, s: Seen | None) -> str:
    """A side's value as shown: an argument the `non-default args` line lacks is at its default, else "not in log"."""
    if s is not None:
        return s.value
    return DEFAULT if d.status in ("added", "removed") else NOT_IN_LOG


__all__ = ["Comparison", "Difference", "PairAnswer", "Parting", "PhaseMark", "Seen", "StartRead", "StartSpec",
           "compare", "compare_reads", "parse_pair", "parse_spec", "read_start", "value_of"]
