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
from dsv4ctl.diagnosis.answers_devices import DERIVE as _DEVICES
from dsv4ctl.diagnosis.answers_values import DERIVE as _VALUES
from dsv4ctl.diagnosis.answers_world import DERIVE as _WORLD
from dsv4ctl.diagnosis.evidence import command_parts, fill
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

Derive = Callable[[dict[str, Any], StartupTimeline], "dict[str, Any] | None"]
DERIVE: dict[str, Derive] = {**_VALUES, **_WORLD, **_DEVICES}

ANSWERED = ("indexed_error", "unrecognized_error")
# Signatures whose own advice is general (check the flag list): a family that reads the message's values says more.
REFINED = ("cli_arguments_rejected", "quantization_unknown")
# Signatures of a class whose message often carries the error that happened (torch.compile's InductorError wrapping a
# PermissionError; "No space left on device" where the frames say which file system): a family or the words' reading
# of what they carry answers, else the signature stands with the message's own advice added.
WRAPPING = ("compile_error", "eco_no_space_left")
# GPU faults whose text may name the component that faulted (a kernel's source file): its switch is the first action.
COMPONENT_FAULTS = ("cuda_illegal_memory_access", "eco_cuda_device_assert")
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


def answer(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str, brief: bool = False) -> Finding:
    """`f` answered by the first family rule that covers it, else with the message as its headline. `brief`: for an
    earlier start, of which only the verdict and the root cause's id are kept: the same answer without what only adds
    to its text (what the raise site's check reads, what later releases did with the message)."""
    if f.id in COMPONENT_FAULTS:
        return _component(f, tl)
    if f.id in WRAPPING:
        return _inner(f, record, tl, log)
    if f.id not in ANSWERED and f.id not in REFINED:
        return f
    texts = texts_of(f, record)
    answered = _by_family(f, record, texts, tl, log)
    if answered is not None:
        return answered if brief else _with_check(answered, tl)
    if f.id in REFINED:
        return f
    from dsv4ctl.diagnosis import answers_reading  # the words' own reading: only for an error no rule covers

    site = _from_raise_site(f, tl)
    if site is not None:
        return site if brief else _releases_differ(site, tl)
    read = answers_reading.answer(f, record, tl, texts)
    if read is not None:
        return read
    from dsv4ctl.diagnosis import answers_plain

    plain = answers_plain.plain(replace(f, title=headline(f)), record, tl, log)
    return plain if brief else _releases_differ(plain, tl)


def _by_family(f: Finding, record: ErrorRecord | None, texts: list[str], tl: StartupTimeline, log: str,
               skip: tuple[str, ...] = ()) -> Finding | None:
    """`f` answered by the first family rule that matches one of `texts` and takes it (a rule may decline what it
    matched: the next rule is asked), or None."""
    from dsv4ctl.catalogue.families import FAMILIES, FAMILY_OF  # compiled at the first failure no signature explains

    for rule in FAMILIES:
        if rule.id in skip:
            continue
        m = next((m for m in map(rule.match, texts) if m is not None), None)
        if m is not None and (answered := _apply(rule, m.groupdict(), f, record, tl, log,
                                                 FAMILY_OF.get(rule.id, ""))) is not None:
            return answered
    return None


# Findings of an error the server survived or of one request: answered like an originating error, their scope kept.
REQUEST_SCOPED = ("request_error", "error_survived", "error_after_startup")


def answer_scoped(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str) -> Finding:
    """A request's (or a survived) error answered from its message as an originating error would be (a family, the raise
    site, the words' reading), with its own scope kept: its id, role and severity, and the sentence that says the server
    stayed up first. Nothing about it can fail the start."""
    if f.id not in REQUEST_SCOPED or record is None:
        return f
    from dsv4ctl.diagnosis.ranking import indexed_finding, lookup, unrecognized_finding

    entry = lookup(record, None)
    base = indexed_finding(record, None, tl, entry) if entry is not None else unrecognized_finding(record)
    probe = replace(f, id=base.id, details={**f.details, **base.details})
    out = answer(probe, record, tl, log)
    if out is probe or out.details.get("reading") == "plain" and not out.actions:
        return f
    meaning = f"{f.meaning} {out.meaning}".strip()
    details = {**out.details, "scope": "request" if f.role == "request" else "survived"}
    if out.id not in ANSWERED:
        details["answered_as"] = out.id  # the family rule that read it; the finding keeps its scope's id
    return replace(out, id=f.id, role=f.role, severity=f.severity,
                   tier=f.tier, meaning=meaning, actions=_dedupe(out.actions + [a for a in f.actions if a not in out.actions]),
                   details=details, title=f"{f.title}: {out.title}" if out.title and out.title not in f.title else f.title)


def _with_check(f: Finding, tl: StartupTimeline) -> Finding:
    """A family's answer to an indexed message, with what its check reads where the index knows the helpers the check
    calls (`self.draft_model_config.uses_mrope` -> what uses_mrope reads of the model's config)."""
    entry = f.details.get("_entry")
    if entry is None or not entry.check or entry.package != "vllm":
        return f
    from dsv4ctl.catalogue import message_index
    from dsv4ctl.diagnosis import raise_site

    ex = raise_site.explain(entry.check, entry.template, str(f.details.get("message") or ""), tl, message_index.helper)
    if ex is None or not ex.helpers:
        return f
    reads = " ".join(f"`{n}`: {t}." for n, t in ex.helpers)
    return replace(f, meaning=f"{f.meaning} The check where it is raised: `{entry.check}`. {reads}",
                   details={**f.details, "check": entry.check, "check_helpers": [f"{n}: {t}" for n, t in ex.helpers]})


def _from_raise_site(f: Finding, tl: StartupTimeline) -> Finding | None:
    """An indexed error answered from its raise site (diagnosis/raise_site): the condition that guards it, this start's
    values for it, the flags that set them and what passes; None when the check gives nothing to act on."""
    entry = f.details.get("_entry")
    if f.id != "indexed_error" or entry is None:
        return None
    from dsv4ctl.catalogue import message_index
    from dsv4ctl.diagnosis import raise_site

    release = (tl.vllm_version or "").split("+")[0]
    check = (entry.check_in(release) if release and entry.package == "vllm" else None) or entry.check
    message = str(f.details.get("message") or "")
    ex = raise_site.explain(check, entry.template, message, tl, message_index.helper if entry.package == "vllm" else None)
    if ex is None or not (ex.passes or ex.helpers or ex.flags):
        return None
    where = f"{entry.package}'s {entry.function} ({f.details.get('cite') or entry.cite})"
    meaning = f"{where} raises this when `{check.split(' ', 1)[1] if ' ' in check else check}`. {ex.sentence()}"
    actions = list(ex.passes)
    if ex.flags and not ex.passes:
        actions.append("Check the settings this check reads: " + ", ".join(
            f"{flag}" + (f" (this start: {ex.values[n]})" if n in ex.values else "") for n, flag in ex.flags.items()))
    actions.append(f"Read the check where it is raised: {f.details.get('cite') or entry.cite}")
    details = {**f.details, "check": check, "requires": ex.requires, "check_values": dict(ex.values),
               "check_flags": dict(ex.flags), "answered_by": "raise_site"}
    if ex.helpers:
        details["check_helpers"] = [f"{n}: {t}" for n, t in ex.helpers]
    command = next((a.split(": ", 1)[1] for a in ex.passes if ": vllm serve " in a), None)
    if command:
        details["_next"] = command
    return replace(f, title=headline(f), meaning=meaning, actions=actions, details=details)


def _inner(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str) -> Finding:
    """A signature of a wrapping class answered by what it carries (see `WRAPPING`)."""
    from dsv4ctl.diagnosis import answers_reading, reading

    texts = texts_of(f, record)
    message = str(f.details.get("message") or (record.origin.text if record is not None and record.origin else "")
                  or (f.evidence[0].text if f.evidence else ""))
    probe = replace(f, details={**f.details, "message": message, "exception": record.type if record else ""})
    if reading.inner_error(message) is not None or f.id != "compile_error":
        answered = _by_family(replace(probe, id="unrecognized_error"), record, texts, tl, log,
                              skip=("value_unknown_choice",))
        if answered is not None:
            return replace(answered, details={**answered.details, "answered_from": f.id})
        read = answers_reading.answer(probe, record, tl, texts)
        if read is not None:
            return replace(read, id=f.id if f.id != "compile_error" else read.id)
    advice = reading.advice_of(message)
    if advice and not any(advice in a for a in f.actions):
        return replace(f, actions=[f"The message's own advice: {advice}", *f.actions])
    return f


def _component(f: Finding, tl: StartupTimeline) -> Finding:
    """A GPU fault whose own text names the component it happened in (a kernel's source file), with the switch that
    turns that component off, as the first action."""
    from dsv4ctl.diagnosis import answers_reading

    found = answers_reading.component([e.text for e in f.evidence if e.text])
    action = answers_reading.component_action(found, tl) if found else None
    if action is None:
        return f
    return replace(f, actions=[action, *f.actions], details={**f.details, **{k: v for k, v in found.items() if v}})


def _releases_differ(f: Finding, tl: StartupTimeline) -> Finding:
    """What the index shows of an indexed vLLM message after its last release (`IndexedMessage.later`). Only a check that
    is gone from every later release can make an upgrade an answer; the same text under another exception class, or the
    same check reworded, cannot. A path or file that is not there is never fixed by an upgrade."""
    entry = f.details.get("_entry")
    if f.id != "indexed_error" or entry is None or entry.package != "vllm" or not entry.later:
        return f
    later = entry.later
    span = f"{entry.releases[0]}–{entry.releases[-1]}" if len(entry.releases) > 1 else entry.releases[0]
    if "check_gone" in later and not _about_a_path(f):
        newest = (message_index_releases() or [later["check_gone"]])[-1]
        action = (f"The check behind this message is in vLLM {span} only: from {later['check_gone']} on no release dsv4ctl "
                  f"indexed tests it (its condition is gone, not only its words), so a newer vLLM does not refuse this "
                  f"launch the same way; try it with vLLM {newest}")
        return replace(f, actions=[*f.actions, action], details={**f.details, "gone_from": later["check_gone"]})
    if "reworded" in later:
        note = (f"vLLM {later['reworded']} words the same check differently (\"{later['template'][:120]}\"): an upgrade "
                "does not avoid it")
        return replace(f, details={**f.details, "reworded_in": later["reworded"], "note": note})
    if "same_text" in later:
        return replace(f, details={**f.details, "same_text_in": later["same_text"]})
    return f


def message_index_releases() -> list[str]:
    from dsv4ctl.catalogue import message_index

    return list((message_index.header().get("packages") or {}).get("vllm") or ())


def _about_a_path(f: Finding) -> bool:
    """An error about a file or path that is not there: no release fixes a missing file."""
    text = str(f.details.get("message") or "") + " " + str(f.details.get("exception") or "")
    return bool(re.search(r"FileNotFound|No such file|does not exist|doesn't exist|not found|path", text, re.I))


def _apply(rule: Signature, groups: dict[str, Any], f: Finding, record: ErrorRecord | None, tl: StartupTimeline, log: str,
           family: str) -> Finding | None:
    details: dict[str, Any] = {**f.details, **command_parts(tl, log)}
    details.update({k: v for k, v in groups.items() if v is not None})
    details["release"] = tl.vllm_version
    if log not in ("<log>", "-", ""):
        details["_log_path"] = log
    if record is not None:
        details["_frames"] = "\n".join(_frames(record))
    details["_texts"] = "\n".join(texts_of(f, record))  # what a rule may read as evidence (the platform's words)
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
