"""Every number an answer prints is the log's or derived, on every real and blind log the project holds.

An answer (a finding's title, meaning and actions) may print a number only when it is
- in the log itself (as printed, thousands separators aside), or in the log's path (a command that names the file);
- derived, and then kept in the finding's details (the arithmetic, the values a check compared, a planned length);
- written by hand in dsv4ctl's own texts, each beside the source it was read from (the catalogue's signatures and
  families, the answer modules' literals: a default of a package, a thread's number, a constant of a kernel);
- part of a citation (package==version path:line), a version, or a thread reference (#1234).
A number that is none of these was made up on the way: the test names the file, the finding and the number.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [ROOT.parent / "shared" / "real-logs" / "logs", ROOT / "tests" / "fixtures" / "pastes",
           ROOT / "tests" / "fixtures" / "blind"]
LOGS = sorted(p for d in CORPORA if d.is_dir() for p in d.iterdir() if p.suffix in (".log", ".txt", ".json") and
              p.name != "labels.json")

_NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w.])")
_CITATION = re.compile(
    r"\b[\w.-]+==[\w.+]+(?: [\w/.<>-]+(?::\d+(?:-\d+)?(?:,\s?\d+)*)?)?"  # package==version path:line
    r"|\b[\w/.-]+\.(?:py|cc|cpp|cu|cuh|h|hpp|rs|so(?:\.\d+)*):\d+(?:-\d+)?(?:,\s?\d+)*"  # file:line
    r"|(?:[\w.-]+/[\w.-]+)?#\d+"  # a thread
    r"|\bv?\d+\.\d+(?:\.\d+)+(?:\.?(?:post|dev|rc)\d+)?(?:\+\w+)?"  # a version
    r"|\b(?:sm_?|compute_|SM|gfx|MI|CUDA |cu|H|B|A|GB|L)\d+\w*"  # GPU and CUDA names
    r"|\b\d+(?:\.\d+)? ?[KMGT]i?B\b(?=[^\n]*\b(?:e\.g\.|default))"  # sizes quoted as examples of a default
)
_DIGITS_IN_NAMES = re.compile(r"[A-Za-z_][\w-]*\d[\w-]*|\d+[A-Za-z_][\w-]*")  # fp8, e4m3, DP0, 2xH200, TP4


def _numbers(text: str) -> set[str]:
    text = _CITATION.sub(" ", text)
    text = _DIGITS_IN_NAMES.sub(" ", text)
    return {m.group(0).replace(",", "").lstrip("-") for m in _NUM.finditer(text)}


def _equal(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


@lru_cache(maxsize=1)
def _answer_literals() -> frozenset[str]:
    """The numbers of the answer modules' own texts (string literals and numeric constants of dsv4ctl/diagnosis: the
    CUDA codes' meanings, a package's defaults quoted beside their source)."""
    out: set[str] = set()
    for path in (ROOT / "dsv4ctl" / "diagnosis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out |= _numbers(node.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
                out.add(str(node.value))
    return frozenset(out)


@lru_cache(maxsize=None)
def _signature_numbers(finding_id: str) -> frozenset[str]:
    """The numbers of the finding's own signature or family, as written in the catalogue with its source."""
    from dsv4ctl.catalogue.signatures import BY_ID

    try:
        sig = BY_ID[finding_id]
    except KeyError:
        return frozenset()
    return frozenset(_numbers("\n".join([sig.title, sig.meaning, *sig.actions, sig.source, sig.next_command or ""])))


def made_up(finding, log_text: str, path: str) -> list[str]:
    """The numbers of a finding's answer that are neither the log's, nor derived (its details), nor hand-written
    with their source (its signature's texts, the answer modules' literals)."""
    from_log = _numbers(log_text) | _numbers(path) | {m.replace(",", "") for m in _NUM.findall(log_text)}
    derived = _numbers(json.dumps(finding.to_json()["details"], default=str))
    known = from_log | derived | _signature_numbers(finding.id) | _answer_literals()
    for key in ("answered_from", "answered_as", "refined_by", "classified_as"):
        if isinstance(finding.details.get(key), str):
            known |= _signature_numbers(finding.details[key])
    text = "\n".join([finding.title, finding.meaning, *finding.actions])
    return sorted(n for n in _numbers(text) if not _allowed(n, known))


def _allowed(number: str, known: set[str]) -> bool:
    return number in known or any(_equal(number, k) for k in known if k.replace(".", "", 1).isdigit())


@pytest.mark.skipif(not LOGS, reason="no log corpus next to the checkout")
@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_number_of_an_answer_is_the_logs_or_derived(path: Path):
    d = diagnose([str(path)])
    log = path.read_text(encoding="utf-8", errors="replace")
    for f in d.findings:
        if f.is_root_cause or f.severity == "warning":
            bad = made_up(f, log, str(path))
            assert not bad, f"{f.id}: {bad} in {' | '.join([f.title, f.meaning, *f.actions])[:400]!r}"


def test_a_number_from_nowhere_is_caught(tmp_path):
    log = tmp_path / "kv.log"
    log.write_text("ValueError: To serve at least one request with the models's max seq len (1048576), (10.06 GiB KV "
                   "cache is needed, which is larger than the available KV cache memory (8.02 GiB).\n")
    d = diagnose([str(log)])
    root = d.root_cause
    assert made_up(root, log.read_text(), str(log)) == []
    root.meaning += " At 37.5 GiB it would fit 4,194,304 tokens."
    assert made_up(root, log.read_text(), str(log)) == ["37.5", "4194304"]


# ------------------------------------------------------------------------------------ packages and platforms
_PIP_INSTALL = re.compile(r"pip install (?P<rest>[^\n]*)")


def _installed_names(rest: str) -> list[str]:
    """The distributions a `pip install …` names: its arguments up to the end of the command (a comma, a semicolon,
    a closing parenthesis of the sentence), options left out."""
    import shlex

    try:
        tokens = shlex.split(rest)
    except ValueError:
        tokens = rest.split()
    names = []
    prose = {"in", "the", "to", "and", "or", "then", "with", "for", "of", "when", "if", "so", "into", "where"}
    for tok in tokens:
        if tok in prose:
            break  # the sentence goes on after the command
        end = tok[-1:] in (",", ";", ")")
        tok = tok.rstrip(",;)")
        if tok and not tok.startswith("-") and tok not in (".", "&&", "|"):
            names.append(re.split(r"[<>=!~\[]", tok)[0].lower().replace("_", "-"))
        if end or tok in ("&&", "|"):
            break
    return [n for n in names if n]


_BACKEND = re.compile(r"--attention-backend (?P<name>[A-Z][A-Z0-9_]+)")
_PLATFORM_PREFIX = {"ROCM_": "ROCm", "XPU_": "XPU", "CPU_": "CPU"}


def _known_distributions() -> set[str]:
    """The distributions an answer may tell to install: those whose metadata dsv4ctl's tables cite, and the packages
    vLLM itself installs beside it."""
    from dsv4ctl.diagnosis import answers_world, reading

    names = {pip for pip, _ in answers_world._PACKAGES.values() if pip} | set(reading.DISTRIBUTION.values())
    return names | {"vllm", "torch", "transformers", "huggingface_hub", "huggingface-hub", "triton", "ray", "safetensors",
                    "flashinfer-python", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "numpy", "hf_transfer"}


@pytest.mark.skipif(not LOGS, reason="no log corpus next to the checkout")
def test_no_answer_names_a_package_without_evidence_or_a_backend_of_another_platform():
    known = {n.lower().replace("_", "-") for n in _known_distributions()}
    for path in LOGS:
        d = diagnose([str(path)])
        log = path.read_text(encoding="utf-8", errors="replace")
        for f in d.findings:
            text = "\n".join([f.title, f.meaning, *f.actions])
            for m in _PIP_INSTALL.finditer(text):
                for base in _installed_names(m.group("rest")):
                    # a package the log's own message names to install (a model's remote code's requirements) is evidence
                    assert base in known or base in log.lower().replace("_", "-"), (path.name, f.id, base)
            for m in _BACKEND.finditer(text):
                platform = next((p for prefix, p in _PLATFORM_PREFIX.items() if m.group("name").startswith(prefix)), None)
                if platform is not None:
                    assert platform.lower() in log.lower(), (path.name, f.id, m.group("name"))


def test_a_guessed_package_name_is_caught():
    # vllm-ascend's compiled custom_ops is not a PyPI package: a name guessed from the module would be caught.
    assert _installed_names("custom-ops into vLLM's environment") == ["custom-ops"]
    assert "custom-ops" not in {n.lower().replace("_", "-") for n in _known_distributions()}
    assert _installed_names('--force-reinstall "vllm==$(pip show vllm | sed -n \'s/^Version: //p\')"') == ["vllm"]
    assert _installed_names("-e . in the vLLM checkout") == []
