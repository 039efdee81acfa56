"""The differences ranked by how they bear on BAD's failure, as BAD's own diagnosis states it.

First, when BAD failed with the stale-length assertion (root cause `stale_max_model_len`) and auto-fit reduced the
length in BAD but not in GOOD: the upstream analysis (shared/upstream/stale-max-model-len-after-autofit.txt) calls
that correlation "particularly strong". Then the differences of a category BAD's root cause speaks of (its title,
meaning, quoted lines and detail names, read for the words of each category below), then the rest; within a tier by
category (length, memory, release, parallel, args, env, model), a launch argument before what vLLM logged.
"""

from __future__ import annotations

from dsv4ctl.compare.facts import CATEGORIES
from dsv4ctl.compare.model import Difference, StartRead
from dsv4ctl.diagnosis.model import Finding

STALE = "stale_max_model_len"
# The words by which a root cause speaks of a category (lower case; `_` and `-` read as spaces).
WORDS = {
    "length": ("max model len", "max seq len", "context length", "model length", "auto fit"),
    "memory": ("kv cache", "memory", "out of memory", "oom", "gpu memory utilization"),
    "parallel": ("tensor parallel", "pipeline parallel", "data parallel", "expert parallel", "nccl", "world size"),
    "release": ("version", "not supported", "no kernel image", "undefined symbol", "fix"),
    "env": ("environment variable",),
}


def _text(f: Finding) -> str:
    parts = [f.id, f.title, f.meaning, *(e.text for e in f.evidence), *f.details]
    return " ".join(str(p) for p in parts).lower().replace("_", " ").replace("-", " ")


def touched(rc: Finding | None) -> list[str]:
    """The categories BAD's root cause speaks of, in CATEGORIES order."""
    if rc is None:
        return []
    text = _text(rc)
    return [c for c in CATEGORIES if any(w in text for w in WORDS.get(c, ()))]


def stale_pattern(d: Difference, bad: StartRead) -> bool:
    rc = bad.diagnosis.root_cause
    return (d.name == "auto-fit" and rc is not None and rc.id == STALE and d.bad is not None
            and d.bad.value.startswith("reduced") and (d.good is None or not d.good.value.startswith("reduced")))


def rank(facts: list[Difference], bad: StartRead) -> None:
    """Each difference given its rank (1 = bears most) and why; equal facts keep none."""
    rc = bad.diagnosis.root_cause
    named = touched(rc) if bad.verdict in ("failed", "stuck") else []
    order = {c: i for i, c in enumerate(CATEGORIES)}

    def tier(d: Difference) -> int:
        if stale_pattern(d, bad):
            return 0
        return 1 if d.category in named else 2

    where = f", line {rc.line}" if rc is not None and rc.line else ""
    # Within a tier and category the launch's own arguments come before what vLLM logged of them (the change first).
    key = lambda d: (tier(d), order[d.category], not d.name.startswith("--"))  # noqa: E731
    for n, d in enumerate(sorted((d for d in facts if d.differs), key=key), 1):
        d.rank = n
        t = tier(d)
        if t == 0:
            d.bearing = (f"BAD failed with the stale-length assertion ({STALE}{where}) after auto-fit reduced its "
                         f"length; GOOD's was not reduced: the upstream analysis calls this correlation particularly "
                         f"strong")
        elif t == 1:
            d.bearing = f"BAD's root cause ({rc.id}{where}) speaks of {d.category}"
        elif bad.verdict not in ("failed", "stuck"):
            d.bearing = f"BAD did not fail ({bad.verdict}): no failure to bear on"
        else:
            d.bearing = "BAD's root cause does not speak of it" if rc is not None else "BAD's log names no root cause"
