"""The answer to an error no signature explained: the family rule (dsv4ctl/catalogue/families) that covers its class,
filled from the message's own arguments and this launch's flags; else the message itself as the headline.

`answer(f, record, tl, log)` is called on the root finding that `ranking` built (`indexed_error`,
`unrecognized_error`). A family rule reads the error's message, its quoted wrapper, its chain, its evidence lines and
its frames; its `derive` step (answers_values, answers_world; keyed by rule id) computes what the templates need: the
flag that sets a limit, the divisors that work, the cache a path belongs to, what a CUDA code means. A rule whose step
finds nothing to say (a limit no flag sets) declines, and the next rule is tried. What the message index knew
(source, releases) stays in the details.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable

from dsv4ctl.catalogue.signature import Signature
from dsv4ctl.diagnosis.answers_values import DERIVE as _VALUES
from dsv4ctl.diagnosis.answers_world import DERIVE as _WORLD
from dsv4ctl.diagnosis.evidence import command_parts, fill
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

Derive = Callable[[dict[str, Any], StartupTimeline], "dict[str, Any] | None"]
DERIVE: dict[str, Derive] = {**_VALUES, **_WORLD}

ANSWERED = ("indexed_error", "unrecognized_error")
# Signatures whose own advice is general (check the flag list): a family that reads the message's values says more.
REFINED = ("cli_arguments_rejected", "quantization_unknown")
_HEADLINE_MAX = 140


def texts_of(f: Finding, record: ErrorRecord | None) -> list[str]:
    """What a family rule reads: the message, the quoted wrapper and chain, the evidence lines, the frames."""
    out: list[str] = []
    for key in ("message", "template"):
        value = f.details.get(key)
        if isinstance(value, str) and value:
            out.append(value)
    out += [c for c in f.details.get("chain", []) if isinstance(c, str)]
    out += [e.text for e in f.evidence if e.text]
    return out + _frames(record)


def _frames(record: ErrorRecord | None) -> list[str]:
    """The innermost frames as rules read them ("frame: FILE:LINE in FUNCTION")."""
    return [f"frame: {fr.file}:{fr.lineno} in {fr.function}" for fr in record.frames[-8:]] if record is not None else []


def answer(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str) -> Finding:
    """`f` answered by the first family rule that covers it, else with the message as its headline."""
    if f.id not in ANSWERED and f.id not in REFINED:
        return f
    from dsv4ctl.catalogue.families import FAMILIES, FAMILY_OF  # compiled at the first failure no signature explains

    texts = texts_of(f, record)
    for rule in FAMILIES:
        for text in texts:
            m = rule.match(text)
            if m is None:
                continue
            answered = _apply(rule, m.groupdict(), f, record, tl, log, FAMILY_OF.get(rule.id, ""))
            if answered is not None:
                return answered
            break
    if f.id in REFINED:
        return f
    return _releases_differ(replace(f, title=headline(f)), tl)


def _releases_differ(f: Finding, tl: StartupTimeline) -> Finding:
    """An indexed vLLM message that later releases no longer print: the check is gone there, which is an action (the
    message index's releases, catalogue/message_index)."""
    releases = f.details.get("releases")
    if f.id != "indexed_error" or f.details.get("package") != "vllm" or not releases:
        return f
    from dsv4ctl.catalogue import message_index

    indexed = list((message_index.header().get("packages") or {}).get("vllm") or ())
    later = [r for r in indexed if r not in releases and indexed.index(r) > indexed.index(releases[-1])] if releases[-1] in indexed else []
    if not later:
        return f
    action = (f"vLLM {later[0]} and later no longer print this message (it is in {releases[0]}–{releases[-1]} only): the "
              f"check was removed or reworded there, so a newer vLLM may accept this launch; try it with vLLM {later[-1]}")
    return replace(f, actions=[action, *f.actions], details={**f.details, "gone_from": later[0]})


def _apply(rule: Signature, groups: dict[str, Any], f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str,
           family: str) -> Finding | None:
    details: dict[str, Any] = {**f.details, **command_parts(tl, log)}
    details.update({k: v for k, v in groups.items() if v is not None})
    details["release"] = tl.vllm_version
    if log not in ("<log>", "-", ""):
        details["_log_path"] = log
    if record is not None:
        details["_frames"] = "\n".join(_frames(record))
    step = DERIVE.get(rule.id)
    if step is not None:
        extra = step(details, tl)
        if extra is None:
            return None
        details.update(extra)
    actions = _dedupe([a for a in (fill(t, details) for t in rule.actions) if a and a.strip()])
    if not actions:
        return None
    title = fill(rule.title, details) or rule.title.split("{")[0].strip()
    meaning = fill(rule.meaning, details) or f.meaning
    if f.id == "indexed_error" and details.get("cite"):
        meaning = f"{meaning} The message is {details.get('package', 'vllm')}'s ({details['cite']})."
    details["family"] = family
    if f.id in REFINED:
        # The signature names the class; the family adds what the message's values say, before the signature's advice.
        details["refined_by"] = rule.id
        return replace(f, actions=_dedupe(actions + [a for a in f.actions if a not in actions]), details=details)
    details["answered_from"] = f.id
    return replace(f, id=rule.id, title=title, meaning=meaning, actions=actions, details=details, tier=rule.tier,
                   severity=rule.severity, role=rule.role)


def _dedupe(actions: list[str]) -> list[str]:
    """One action per instruction: of two that say the same (the same words up to " (" or ": "), the one with a
    command (for a log that names its model) replaces the one without."""
    out: list[str] = []
    keys: list[str] = []
    for a in actions:
        key = re.split(r" \(|: ", a, maxsplit=1)[0]
        if key in keys:
            k = keys.index(key)
            if "vllm serve " in a and "vllm serve " not in out[k]:
                out[k] = a
            continue
        keys.append(key)
        out.append(a)
    return out


def headline(f: Finding) -> str:
    """An error no rule explains is headed by its own message, trimmed."""
    text = str(f.details.get("message") or (f.evidence[0].text if f.evidence else "") or f.title).strip()
    text = " ".join(text.split())
    return text if len(text) <= _HEADLINE_MAX else text[: _HEADLINE_MAX - 1].rstrip() + "…"
