"""vLLM's messages (errors, assertions, logged errors) one release prints and the other does not, from the catalogue's
message index: the counts, and the messages of the launch's model family or raised on the launch's flags."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dsv4ctl.catalogue import message_index

# The subfolders of a model's folder that hold another accelerator's code (vllm/models/deepseek_v4/amd/...). The
# releases 0.27.1-0.34.0 have amd/, cpu/, xpu/ beside nvidia/ and common/ (deepseek_v4 and deepseek_v41); the other
# names are vLLM's other platforms (vllm/platforms/: rocm, tpu) and its out-of-tree platforms', should a release
# add such a subfolder.
OTHER_PLATFORMS = {"nvidia": ("amd", "rocm", "xpu", "tpu", "cpu", "ascend", "npu", "hpu", "neuron")}


@dataclass(frozen=True)
class MessageNote:
    template: str
    kind: str  # raise | assert | assert_bare | log | ...
    exception: str | None
    where: str  # 'vllm==0.33.0 vllm/models/deepseek_v4/nvidia/model.py:812'
    why: str  # "model" (the family's code) | "flag --x" (raised on a flag the launch passes)

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "kind": self.kind, "exception": self.exception, "where": self.where,
                "why": self.why}


@dataclass(frozen=True)
class MessagesDiff:
    recorded: bool
    note: str | None
    family: str | None  # the model's folder in vLLM ('deepseek_v4'), None when the architecture does not say
    appeared: int  # vLLM messages the newer side prints and the other does not
    vanished: int
    relevant_appeared: tuple[MessageNote, ...]
    relevant_vanished: tuple[MessageNote, ...]

    def to_json(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "note": self.note, "family": self.family, "appeared": self.appeared,
                "vanished": self.vanished, "relevant_appeared": [m.to_json() for m in self.relevant_appeared],
                "relevant_vanished": [m.to_json() for m in self.relevant_vanished]}


def family_of(architecture: str | None) -> str | None:
    """vLLM's folder for an architecture: DeepseekV4ForCausalLM -> deepseek_v4 (vllm/models/deepseek_v4/)."""
    if not architecture:
        return None
    stem = re.sub(r"(For[A-Z]\w*|Model)$", "", architecture)
    words = re.findall(r"[A-Z][a-z]+|[A-Z]?\d+|[A-Z]+(?![a-z])", stem)
    return "_".join(w.lower() for w in words) or None


def _files(entry: Any, release: str) -> list[str]:
    return [s.file for s in entry.sources if release in s.releases]


def _other_platform(file: str, platform: str | None) -> bool:
    """True for a file in a model folder's subfolder of another accelerator (vllm/models/deepseek_v4/amd/mtp.py on
    NVIDIA GPUs)."""
    parts = file.split("/")
    return len(parts) > 3 and parts[:2] == ["vllm", "models"] and parts[3] in OTHER_PLATFORMS.get(platform or "", ())


def _in_family(files: list[str], family: str | None, platform: str | None) -> bool:
    if not family:
        return False
    folder = f"vllm/models/{family}/"
    return any(f.startswith(folder) and not _other_platform(f, platform) for f in files)


def _note(entry: Any, release: str, why: str, platform: str | None) -> MessageNote:
    """The message where the launch's GPUs run it: a statement in another accelerator's subfolder is cited only when
    the message has no other."""
    sources = [s for s in entry.sources if release in s.releases]
    own = [s for s in sources if not _other_platform(s.file, platform)] or sources
    src = min(own, key=lambda s: (s.file, s.line))
    return MessageNote(entry.template, entry.kind, entry.exception, f"vllm=={release} {src.file}:{src.line}", why)


def _why(entry: Any, release: str, family: str | None, platform: str | None, options: set[str]) -> str | None:
    files = _files(entry, release)
    if _in_family(files, family, platform):
        return "model"
    if files and all(_other_platform(f, platform) for f in files):
        return None  # raised only in another accelerator's code
    hit = sorted(set(entry.flags) & options)
    return f"flag {hit[0]}" if hit else None


def messages_diff(a: str, b: str, *, architecture: str | None, options: set[str], platform: str | None) -> MessagesDiff:
    """The vLLM messages of release `b` that `a` lacks (appeared) and those of `a` that `b` lacks (vanished);
    relevant: in the model's folder (another platform's subfolder aside) or guarded by a flag the launch passes."""
    family = family_of(architecture)
    indexed = message_index.header().get("packages", {}).get("vllm", [])
    missing = [r for r in (a, b) if r not in indexed]
    if missing:
        span = f"{indexed[0]}-{indexed[-1]}" if indexed else "none: the index did not load"
        return MessagesDiff(False, f"not recorded: the message index has no vLLM {' or '.join(missing)} "
                            f"(it has {span})", family, 0, 0, (), ())
    appeared: list[MessageNote] = []
    vanished: list[MessageNote] = []
    counts = [0, 0]
    entries = [(e, {r for s in e.sources for r in s.releases}) for e in message_index.entries() if e.package == "vllm"]
    # A message is its text: one whose statement moved or whose check changed is in both releases, under two entries.
    texts = {r: {e.template for e, releases in entries if r in releases} for r in (a, b)}
    for entry, releases in entries:
        if (a in releases) == (b in releases):
            continue
        side, other = (b, a) if b in releases else (a, b)
        if entry.template in texts[other]:
            continue
        counts[side == a] += 1
        why = _why(entry, side, family, platform, options)
        if why is not None:
            (appeared if side == b else vanished).append(_note(entry, side, why, platform))
    order = lambda m: (m.why != "model", m.where)  # noqa: E731
    return MessagesDiff(True, None, family, counts[0], counts[1], tuple(sorted(appeared, key=order)),
                        tuple(sorted(vanished, key=order)))
