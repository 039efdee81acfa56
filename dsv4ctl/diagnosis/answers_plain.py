"""The answer when nothing specific holds: the error's message as the headline, what its exception means and where it
was raised in plain words, and the next look (the lines before it, the versions of the packages in its frames, the
source of the check). Never a bug report: what to read next, and where."""

from __future__ import annotations

import shlex
from dataclasses import replace

from dsv4ctl.diagnosis import reading
from dsv4ctl.diagnosis.answers_parts import part_of
from dsv4ctl.diagnosis.answers_reading import frames_of, where_of
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline


# What a built-in exception means, in the words of CPython's documentation of it (Doc/library/exceptions.rst, 3.11),
# and of the json module's decoder (Doc/library/json.rst: JSONDecodeError).
_EXCEPTION_MEANING = {
    "KeyError": "a key was looked up in a mapping that does not have it",
    "IndexError": "a position past the end of a sequence was read",
    "AttributeError": "an object does not have the attribute the code uses",
    "TypeError": "an operation got an object of a type it does not take",
    "ValueError": "a value of the right type was not one the code accepts",
    "NotImplementedError": "the code has no implementation for this case",
    "AssertionError": "a consistency check (assert) of the code did not hold",
    "ImportError": "a module, or a name in it, could not be imported",
    "ModuleNotFoundError": "a module is not installed in this Python environment",
    "RuntimeError": "the code stopped on an error it names in its message",
    "EOFError": "input() read the end of its input: the process has no terminal to ask on",
    "ZeroDivisionError": "a division by zero",
    "OverflowError": "a number too large for the operation",
    "RecursionError": "the call stack grew past Python's recursion limit",
    "UnicodeDecodeError": "bytes were not valid text in the encoding the code read them with",
    "JSONDecodeError": "text that should be JSON is invalid JSON (malformed, or cut short)",
    "TimeoutError": "an operation ran past its time limit",
}


def plain(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str) -> Finding:
    """The answer when nothing specific holds: the message as the headline, what the exception means and where it was
    raised in plain words, and the next look: the lines before it, the versions of the packages its frames are in, the
    source of the check."""
    message = str(f.details.get("message") or (f.evidence[0].text if f.evidence else ""))
    exception = str(f.details.get("exception") or "")
    short = exception.rsplit(".", 1)[-1]
    inner = reading.inner_error(message)
    if inner is not None and inner[0] != exception:
        short = inner[0].rsplit(".", 1)[-1]
    meaning_of = _EXCEPTION_MEANING.get(short)
    frames = frames_of(record)
    packages = list(dict.fromkeys(p for p in (reading.package_of(fr.file) for fr in frames) if p))
    fr = frames[-1] if frames else None
    parts = []
    cpp = reading.cpp_meaning(message)
    if cpp:
        parts.append(f"This is a C++ library's message: {cpp}.")
    elif meaning_of:
        parts.append(f"{short}: {meaning_of}.")
    if fr is not None:
        owner = reading.package_of(fr.file)
        parts.append(f"It was raised in {where_of(fr)}" + (f", {owner}'s code" if owner else "") + ".")
    if f.details.get("cite"):
        parts.append(f"The message is {f.details.get('package', 'vllm')}'s ({f.details['cite']}).")
    parts.append("No rule of dsv4ctl's covers this message; what the log shows of it is quoted below.")
    actions: list[str] = []
    part = part_of([fr.file for fr in frames])
    if part is not None:
        parts.insert(-1, f"It came from {part.name}. {part.sentence}")
        actions += part.actions
    details: dict = {"reading": "plain", "packages": packages, **({"part": part.name} if part else {})}
    lead = f.evidence[0] if f.evidence else None
    if lead is not None and log not in ("<log>", "-", "") and lead.line > 1:
        start = max(1, lead.line - 40)
        actions.append(f"Read what the same process logged before it: sed -n '{start},{lead.line}p' {shlex.quote(log)}")
        details["context_lines"] = [start, lead.line]  # the 40 lines before the error's own
    if packages:
        dists = " ".join(reading.DISTRIBUTION.get(p, p) for p in packages[-3:])
        actions.append(f"See the versions of the packages in its frames: pip show {dists}")
    if f.details.get("cite"):
        actions.append(f"Read the check where it is raised: {f.details['cite']}")
    advice = reading.advice_of(message)
    if advice:
        actions.insert(0, f"The message's own advice: {advice}")
    next_look = next((a.split(": ", 1)[1] for a in actions if a.startswith(("Read what", "See the versions"))), None)
    if next_look:
        details["_next"] = next_look
    return replace(f, meaning=" ".join(parts), actions=actions or list(f.actions), details={**f.details, **details})
