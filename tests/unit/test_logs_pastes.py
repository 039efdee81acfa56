"""Metamorphic tests of `diagnose`: the project's labelled fixture logs, cut and wrapped the way operators paste
them, must be diagnosed like the fixture itself.

Fixtures (the `# ` header lines dropped):
- failed: tests/fixtures/logs/catalogue/vllm_*.log (cause line: EVIDENCE_LINE of test_logs_catalogue_vllm, root
  cause: the stem's id), eco_*.log (cause line: the first holding EVIDENCE of test_logs_catalogue_ecosystem, root
  cause: the stem before `__`), the failed core fixtures of test_logs_diagnose.EXPECTED and the failed examples
  (root cause pinned there; cause line: the line the whole log's root cause quotes first, `CORE_CAUSE_LINE`);
- symptom: vllm fixtures of a `symptom` signature (the finding of that id must quote the line, the verdict is failed);
- request: vllm fixtures of a `request` signature and request_error_while_serving (not failed, the finding quotes it);
- control: the healthy and inconclusive core fixtures and dsv4ctl/examples/healthy.log (never failed).

Transforms (tests/pastes.py):
- wrappers on every line (the brief's): plain, compose (`vllm-1  | `), kubectl (`<RFC 3339 ns>Z [pod/vllm-0/vllm] `),
  kubectl_pf (`[pod/vllm-0/vllm] <time>Z `), journald (`Nov 30 09:00:01 gpu-node-3 vllm[2314]: `), rfc3339
  (`2026-11-30T09:00:01.123456+00:00 `), gha (`2026-11-30T09:00:01.1234567Z `), buildkite (`\\x1b_bk;t=…\\x07`),
  ansi_esc / ansi_bare (vLLM's colours around the process tag, level and time, with and without the ESC byte),
  ray (worker tags become `(RayWorkerWrapper pid=<pid>, ip=10.0.0.2)`), strip (only the message, indentation
  kept), compose_ansi (colour inside compose), gha_ansi_bare (ESC-less colour inside GitHub timestamps);
- the files shippers write: docker_json (Docker's json-file entries), cri (the CRI format, long lines split into
  P parts);
- wrappers beyond the brief, other shapes of real pastes: strip_flat (the message without its indentation),
  crlf, compose_colour (compose's coloured service name), elided (`pid=...`, `ERROR ... [file.py:N]`), srun
  (Slurm's `0: ` label), quote (a reply's `> `), fenced (the excerpt in a ``` code fence);
- excerpts: whole, tail40 (the last 40 lines, where they hold the cause and are not the whole log), alone (the
  cause line), window (15 lines before, 5 after), tb_headless (the traceback holding the cause from its first
  `File "` line, without the `Traceback (most recent call last):` header), exc_plus6 (the exception line that
  is the cause and the 6 lines above it), and beyond the brief: tb_mid (the same traceback from the code line
  under its first frame), from_cause (the cause line to the end of the log), gap (the first 3 lines, a `...`
  line, the window);
- combinations (pastes.PLAN, not the cross product): whole and alone x every wrapper; window x plain, compose,
  kubectl, journald, ansi_bare, strip, strip_flat, elided, srun, quote; tail40 x plain, gha, buildkite, ray,
  compose_ansi; tb_headless x plain, strip (the headless traceback with the process prefixes stripped),
  compose, ansi_esc, kubectl_pf, strip_flat, crlf, fenced, srun, quote, docker_json, cri; exc_plus6 x plain, strip, compose,
  ansi_bare, journald, strip_flat; tb_mid x plain, strip, compose, ansi_bare; from_cause x plain, kubectl,
  strip, fenced; gap x plain, compose, strip, elided. Controls: whole and tail40 x every wrapper. A wrapper
  that changes nothing (Ray on a log without worker tags, colour on a log already coloured) or would stack a
  layer no tool writes (compose or kubectl around a compose log) is left out.

What each paste must give (the containment rule of /work/shared/real-logs/score.py: an evidence text, stripped,
contains or is contained in the cause line's message as parse_line reads it in the original fixture):
- failed: verdict "failed"; the root cause's evidence quotes the cause line; the root cause id is the fixture's.
  Relaxed (`_accepted_ids`) only where the paste no longer holds what identifies the class: no line of it
  matches the expected signature and not all of the fixture's `CONTEXT` lines are in it (e.g. the NCCL line
  alone of deepgemm_metadata_oob_nccl_masked, which is DeepGEMM's only through the FULL-capture line and the
  DeepSeek-V4 banner), or a derived class lacks the other line it needs (`NEEDS_ALSO`: DeepGEMM's metadata
  fault without the fault line). Then `unrecognized_error`, a catalogue signature matching the cause line itself, or a
  finding from outside the catalogue (the message index) is accepted too; the line must still be quoted.
- symptom: verdict "failed"; a finding with the fixture's id quotes the cause line.
- request: verdict not "failed"; a finding with the fixture's id quotes the cause line.
- control: verdict not "failed".
Where the root cause quotes the line, one of its evidence texts is the message exactly (no wrapper left on it).
Every paste: diagnose does not raise and to_json() goes through json.dumps.
"""

from __future__ import annotations

import io
import json
import re
from functools import lru_cache

import pytest

import test_logs_catalogue_ecosystem as eco_tests
import test_logs_catalogue_vllm as vllm_tests
import test_logs_diagnose as diagnose_tests
from dsv4ctl.advice import diagnose
from dsv4ctl.diagnosis import Diagnosis
from dsv4ctl.catalogue.signatures import BY_ID, CATALOGUE
from pastes import CATALOGUE_DIR, EXAMPLES, FIXTURES, Fixture, Paste, make_fixture, pastes

# Core fixtures and examples: the line (1-based, in the file) the whole log's root cause quotes first.
CORE_CAUSE_LINE = {
    "address_in_use": 8,
    # serve's own line about its engine process that died (dsv4ctl/serve/engines.py)
    "real_v032_cpu_headless_engine_killed": 52,
    "cli_arguments_rejected": 5,
    "compile_error": 24,
    "cuda_driver_too_old": 17,
    "cuda_fault_while_serving": 35,
    "cuda_illegal_memory_access": 25,
    "cuda_oom_capture": 28,
    "cuda_oom_load": 12,
    "cuda_oom_profile": 24,
    "cuda_oom_serving": 35,
    "deep_gemm_missing": 15,
    "deepgemm_metadata_oob_coredump": 27,
    "deepgemm_metadata_oob_nccl_masked": 29,
    "deepgemm_metadata_oob_traced": 31,
    "deepgemm_unsupported_arch": 23,
    "error_after_startup": 24,
    "free_memory_below_utilization": 18,
    "interleaved_multiprocess": 30,
    "kv_cache_dtype_unsupported": 18,
    "kv_cache_insufficient_cannot_autofit": 23,
    "kv_cache_insufficient_legacy": 9,
    "kv_cache_insufficient_no_memory": 23,
    "mtp_next_n_unsupported": 29,
    "mtp_weights_missing": 18,
    "nccl_error": 20,
    "no_sparse_mla_backend": 18,
    "ray_prefixed": 8,
    "real_v032_cpu_kv_insufficient": 71,
    "stale_max_model_len_compose_v029": 14,
    "stale_max_model_len_no_autofit": 7,
    "unrecognized_chained_worker_error": 24,
    "unrecognized_error": 16,
    "unrecognized_quoted_by_wrapper": 20,
    "v034_measured_explicit_len_refused": 66,
    "worker_died": 15,
}
# dsv4ctl/examples: stem -> (root cause, cause line); healthy.log is a control.
EXAMPLE_CAUSE = {
    "deepgemm-ima": ("deepgemm_metadata_oob", 51),
    "kv-cache-insufficient": ("kv_cache_insufficient", 28),
    "stale-max-model-len": ("stale_max_model_len", 56),
}
# Lines (1-based, in the file) that identify a derived class where no line matches its signature: a paste
# holding all of them must still be named by the fixture's id.
CONTEXT = {
    # an NCCL error during FULL capture of DeepSeek-V4: the banner (model) and the FULL-capture progress line
    "deepgemm_metadata_oob_nccl_masked": (4, 20),
    # an illegal memory access during FULL capture of DeepSeek-V4 (DP4): the banner and the FULL-capture line
    "deepgemm-ima": (13, 36),
    # the core dump's frame naming DeepGEMM's metadata kernel (mangled): the fault and its kernel in one line
    "deepgemm_metadata_oob_coredump": (27,),
}
# Classes diagnose derives from more than their own line: the paste must also hold a line of this wording. DeepGEMM's
# metadata fault is named only with the fault itself (an illegal memory access, NCCL's unhandled cuda error, a
# core dump, whose frame names the kernel): its Python frame line alone (`get_paged_mqa_logits_metadata(`) is not
# a failure of that class.
NEEDS_ALSO = {
    "deepgemm_metadata_oob": re.compile(
        r"illegal memory access|unhandled cuda error|CUDBG_EXCEPTION|cudaErrorIllegalAddress"
        r"|deep_gemm5sched\d+sm90_paged_mqa",
        re.IGNORECASE),
}
# dsv4field_<id>.log: the line that holds the cause (the others are notes on healthy starts)
DSV4_FIELD_CAUSE_LINE = {"dsv4_flashmla_empty_prefill_chunk": 52, "fp8_block_tp_split": 20}
# catalogue/<stem>.log of vLLM 0.34 and DSpark: (root cause, the line that holds it); the notes are controls
V034_CAUSE_LINE = {
    "v034_v2_runner_env_refused": ("v2_runner_env_refused", 14),
    "v034_dsv4_o_groups_tp": ("dsv4_o_groups_tp", 12),
    "dspark_flashmla_tensormap": ("dspark_flashmla_tensormap", 12),
    "dspark_map_draft_to_target": ("dspark_map_draft_to_target", 13),
    "ascend_index_check_dspark": ("ascend_index_check_dspark", 4),
    "mtp_refused_for_v41": ("mtp_refused_for_v41", 10),
}
V034_NOTES = ("v034_v2_runner_env_redundant", "v034_extensible_kv_cache_disabled_imex")
# request_error_while_serving: the request's error line (the prompt_too_long warning quotes it)
REQUEST_CORE = {"request_error_while_serving": ("prompt_too_long", 35)}


def _fixtures() -> list[Fixture]:
    out: list[Fixture] = []
    for path in sorted(CATALOGUE_DIR.glob("vllm_*.log")):
        sid = vllm_tests._expected_id(path)
        role = vllm_tests.OURS[sid].role
        kind = {"cause": "failed", "symptom": "symptom", "request": "request"}[role]
        out.append(make_fixture(path, kind, sid, cause_lineno=vllm_tests.EVIDENCE_LINE[path.stem]))
    # The DeepSeek-V4 field signatures (catalogue/signatures_dsv4_field.py): the causes by their own line, the notes as
    # controls (a healthy start that only warns).
    for path in sorted(CATALOGUE_DIR.glob("dsv4field_*.log")):
        sid = path.stem.removeprefix("dsv4field_")
        if sid in DSV4_FIELD_CAUSE_LINE:
            out.append(make_fixture(path, "failed", sid, cause_lineno=DSV4_FIELD_CAUSE_LINE[sid]))
        else:
            out.append(make_fixture(path, "control", None))
    # vLLM 0.34's refusals and notes and DSpark's reported crashes (catalogue/signatures_v034.py, signatures_dspark.py)
    for stem, (sid, line) in sorted(V034_CAUSE_LINE.items()):
        out.append(make_fixture(CATALOGUE_DIR / f"{stem}.log", "failed", sid, cause_lineno=line))
    for stem in V034_NOTES:
        out.append(make_fixture(CATALOGUE_DIR / f"{stem}.log", "control", None))
    for path in eco_tests.FIXTURE_PATHS:
        out.append(make_fixture(path, "failed", eco_tests.sig_id_of(path), cause_text=eco_tests.EVIDENCE[path.stem]))
    for name, (verdict, _code, root, _ids) in sorted(diagnose_tests.EXPECTED.items()):
        path = FIXTURES / f"{name}.log"
        if verdict == "failed":
            out.append(make_fixture(path, "failed", root, cause_lineno=CORE_CAUSE_LINE[name],
                                    context_linenos=CONTEXT.get(name, ())))
        elif name in REQUEST_CORE:
            sid, line = REQUEST_CORE[name]
            out.append(make_fixture(path, "request", sid, cause_lineno=line))
            out.append(make_fixture(path, "control", None))
        else:
            out.append(make_fixture(path, "control", None))
    for path in sorted(EXAMPLES.glob("*.log")):
        if path.stem in EXAMPLE_CAUSE:
            root, line = EXAMPLE_CAUSE[path.stem]
            out.append(make_fixture(path, "failed", root, cause_lineno=line,
                                    context_linenos=CONTEXT.get(path.stem, ())))
        else:
            out.append(make_fixture(path, "control", None))
    return out


FIXTURE_LIST = _fixtures()
PASTES: list[tuple[Fixture, Paste]] = [(fx, p) for fx in FIXTURE_LIST for p in pastes(fx)]


def _cases(kind: str):
    return [pytest.param(fx, p, id=p.id) for fx, p in PASTES if fx.kind == kind]


@lru_cache(maxsize=None)
def _diagnose(paste: Paste) -> Diagnosis:
    return diagnose(io.BytesIO(paste.text))


def _quotes(finding, message: str) -> bool:
    """score.py's rule: an evidence text, stripped, contains or is contained in the cause line's message."""
    key = message.strip()
    for ev in finding.evidence:
        text = (ev.text or "").strip()
        if text and key and (text in key or key in text):
            return True
    return False


def _holds_identity(fx: Fixture, paste: Paste) -> bool:
    """Whether the paste still holds what names the fixture's class: a line the expected signature matches
    (as the original log reads), or all of the fixture's context lines."""
    if fx.expected == "unrecognized_error":
        return True
    also = NEEDS_ALSO.get(fx.expected)
    if also is not None and not any(also.search(fx.parsed[i].message) for i in paste.indices()):
        return False
    sig = BY_ID.get(fx.expected)
    if sig is not None and any(sig.match(fx.parsed[i].message) for i in paste.indices()):
        return True
    return bool(fx.context) and all(paste.holds(i) for i in fx.context)


INDEX_ID = "indexed_error"  # the finding named from the message index (dsv4ctl/catalogue)


def _accepted_ids(fx: Fixture, paste: Paste) -> tuple[set[str], bool]:
    """The root cause ids a paste may give, and whether an id from outside the catalogue (a finding named from
    the message index) is acceptable too: only the fixture's own while the paste holds what identifies it."""
    if fx.expected == "unrecognized_error":
        # An error no signature knows may be a message the index knows (torch's `_OpNamespace` AttributeError):
        # named from the index where the paste holds no frame that contradicts its source.
        return {fx.expected, INDEX_ID}, False
    if _holds_identity(fx, paste):
        return {fx.expected}, False
    msg = fx.cause_message
    return {fx.expected, "unrecognized_error"} | {s.id for s in CATALOGUE if s.match(msg)}, True


def _got(d: Diagnosis) -> str:
    rc = d.root_cause
    ev = rc.evidence[0].text[:140] if rc is not None and rc.evidence else None
    return f"verdict={d.verdict} root={rc.id if rc else None} evidence={ev!r}"


@pytest.mark.parametrize("fx, paste", _cases("failed"))
def test_a_pasted_failure_names_the_same_cause(fx: Fixture, paste: Paste):
    d = _diagnose(paste)
    want = f"want verdict=failed root={fx.expected} quoting {fx.cause_message[:140]!r}; got {_got(d)}"
    assert d.verdict == "failed", want
    rc = d.root_cause
    assert rc is not None, want
    assert _quotes(rc, fx.cause_message), want
    accepted, outside = _accepted_ids(fx, paste)
    if rc.id not in accepted and not (outside and rc.id == INDEX_ID):
        pytest.fail(f"root cause {rc.id} not in {sorted(accepted)}; {want}")


@pytest.mark.parametrize("fx, paste", _cases("symptom"))
def test_a_pasted_symptom_is_still_reported(fx: Fixture, paste: Paste):
    d = _diagnose(paste)
    want = f"want verdict=failed and a {fx.expected} finding quoting {fx.cause_message[:140]!r}; got {_got(d)}"
    assert d.verdict == "failed", want
    assert any(f.id == fx.expected and _quotes(f, fx.cause_message) for f in d.findings), \
        f"{want}; findings={[f.id for f in d.findings]}"


@pytest.mark.parametrize("fx, paste", _cases("request"))
def test_a_pasted_request_error_is_a_warning_not_a_failure(fx: Fixture, paste: Paste):
    d = _diagnose(paste)
    want = f"want not failed and a {fx.expected} finding quoting {fx.cause_message[:140]!r}; got {_got(d)}"
    assert d.verdict != "failed", want
    assert any(f.id == fx.expected and _quotes(f, fx.cause_message) for f in d.findings), \
        f"{want}; findings={[(f.id, f.evidence[0].text[:80] if f.evidence else None) for f in d.findings]}"


@pytest.mark.parametrize("fx, paste", _cases("control"))
def test_a_pasted_healthy_or_inconclusive_start_is_not_failed(fx: Fixture, paste: Paste):
    d = _diagnose(paste)
    assert d.verdict != "failed", _got(d)


@pytest.mark.parametrize("fx", [fx for fx in FIXTURE_LIST if fx.kind == "failed"], ids=lambda fx: fx.stem)
def test_the_quote_is_the_message_without_what_wraps_it(fx: Fixture):
    """Where the root cause quotes the cause line (score.py's containment), one of its evidence texts is that
    line's message exactly: no wrapper, tag, colour code or quote mark left on it (`Evidence.text` is the
    message with the prefixes removed). Pastes whose root cause misses the line are left to the test above."""
    problems = []
    key = fx.cause_message.strip()
    for paste in pastes(fx):
        rc = _diagnose(paste).root_cause
        if rc is None or not _quotes(rc, key):
            continue
        texts = [(ev.text or "").strip() for ev in rc.evidence]
        if key not in texts:
            problems.append(f"{paste.id}: quoted {next(t for t in texts if t and (t in key or key in t))[:120]!r}")
    assert not problems, f"want {key[:120]!r}\n" + "\n".join(problems)


@pytest.mark.parametrize("fx", FIXTURE_LIST, ids=lambda fx: f"{fx.stem}-{fx.kind}")
def test_diagnose_never_raises_and_its_json_serialises(fx: Fixture):
    problems = []
    for paste in pastes(fx):
        try:
            json.dumps(_diagnose(paste).to_json())
        except Exception as exc:  # noqa: BLE001 - any exception is the finding
            problems.append(f"{paste.id}: {type(exc).__name__}: {exc}")
    assert not problems, "\n".join(problems)


def test_the_suite_covers_every_labelled_fixture_and_the_pastes_hold_the_cause():
    stems = {fx.stem for fx in FIXTURE_LIST}
    assert {p.stem for p in CATALOGUE_DIR.glob("*.log")} <= stems
    assert {p.stem for p in FIXTURES.glob("*.log")} <= stems
    assert {p.stem for p in EXAMPLES.glob("*.log")} <= stems
    for fx in FIXTURE_LIST:
        assert not fx.lines[0].startswith("# ")
        if fx.cause is not None:
            assert fx.cause_message, fx.stem
            for paste in pastes(fx):
                assert paste.holds(fx.cause), paste.id
    # The unchanged log (plain wrapper, whole excerpt) is the fixture itself, less its header.
    counts: dict[str, int] = {}
    for fx, p in PASTES:
        counts[fx.kind] = counts.get(fx.kind, 0) + 1
    assert counts["failed"] > 1000 and counts["control"] > 100
