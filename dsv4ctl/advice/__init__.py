"""What to do about a diagnosis: where diagnosis and planning meet.

`advise(diagnosis)` completes a `Diagnosis` as the log shows it (`dsv4ctl.diagnosis`) with what this deployment
should do: the safe --max-model-len planned from the log's own figures (`dsv4ctl.planning`), the catalogue's
actions that fit the launch (none it already uses, none that fails on its release), the next command, and the
length to try in the checklist. `diagnose(...)` / `diagnose_lines(...)` are the two steps together: what
the CLI, `serve` and the Python API use.
"""

from __future__ import annotations

from typing import Any, Iterable

from dsv4ctl.advice.commands import applicable, next_command, settings_of
from dsv4ctl.advice.safe_length import safe_length_details, safe_length_from_log
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis import run
from dsv4ctl.diagnosis.checklist import CHECKLIST_QUESTIONS, EXPLICIT_LENGTH_UNKNOWN
from dsv4ctl.diagnosis.derive import FITS
from dsv4ctl.diagnosis.evidence import fill
from dsv4ctl.diagnosis.model import Diagnosis, Finding
from dsv4ctl.logs.facts import LogCalibration, from_timeline
from dsv4ctl.logs.reader import LogLine


def advise(d: Diagnosis) -> Diagnosis:
    """`d` completed in place (and returned): safe lengths, actions that fit, the next command, the checklist."""
    tl = d.timeline
    for f in d.findings:
        if FITS in f.details:
            f.details.update(safe_length_details(tl, f.details[FITS]))
            _refill(f)
    settings = settings_of(d)
    for f in d.findings:
        f.actions = [x for x in f.actions if applicable(x, settings)]
    d.next_command = next_command(d, settings)
    if tl.autofit is not None:
        for item in d.checklist:
            if item.question == CHECKLIST_QUESTIONS[4] and item.note == EXPLICIT_LENGTH_UNKNOWN:
                safe = safe_length_from_log(tl, tl.autofit.to_len).length
                if safe:
                    item.note += f", e.g. --max-model-len {safe}"
    return d


def _refill(f: Finding) -> None:
    """The finding's meaning and actions from its signature's texts again, now that its details hold the length."""
    sig = BY_ID[f.id]
    f.meaning = fill(sig.meaning, f.details) or sig.meaning.split("{")[0].strip()
    f.actions = [a for a in (fill(t, f.details) for t in sig.actions) if a]


def read_log_facts(path: str) -> LogCalibration:
    """The figures planning takes from a startup log (`fit-length --from-log`, serve's calibration): the
    timeline `diagnose` reads, as `LogCalibration`."""
    return from_timeline(run.diagnose(path).timeline, path)


def diagnose(sources: Any, **kwargs: Any) -> Diagnosis:
    """`dsv4ctl.diagnosis.diagnose` (same arguments), advised. While a big log's scanning children read, the planner
    the advice may need is loaded (`idle`: its modules, ~0.05 s, which would otherwise come after the last line)."""
    kwargs.setdefault("idle", _load_planner)
    return advise(run.diagnose(sources, **kwargs))


def _load_planner() -> None:
    import dsv4ctl.planning  # noqa: F401 - imported ahead, for the safe length a finding may need


def diagnose_lines(lines: Iterable[LogLine]) -> Diagnosis:
    """`dsv4ctl.diagnosis.diagnose_lines`, advised."""
    return advise(run.diagnose_lines(lines))


__all__ = ["advise", "applicable", "diagnose", "diagnose_lines", "read_log_facts", "safe_length_from_log"]
