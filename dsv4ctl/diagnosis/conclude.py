"""The conclusion for one start: verdict, phase (and what it rests on), root cause and findings."""

from __future__ import annotations

from dataclasses import dataclass

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import Hit, StartAnalyzer, window_of
from dsv4ctl.diagnosis.answers import answer_scoped
from dsv4ctl.diagnosis.checklist import checklist, could_be_stale
from dsv4ctl.diagnosis.derive_v034 import dspark_notes, measured_notes
from dsv4ctl.diagnosis.dsv4 import is_dsv4
from dsv4ctl.diagnosis.evidence import evidence_of, fill, line_of, make_finding, ref_evidence
from dsv4ctl.diagnosis.model import Diagnosis, Finding, PhaseBasis
from dsv4ctl.diagnosis.ranking import originating
from dsv4ctl.diagnosis.serving_view import (
    asgi_lines,
    client_finding,
    down_after_error,
    down_details,
    in_request_path,
    request_finding,
    signed_lines,
)
from dsv4ctl.diagnosis.stuck import shortage_finding, stuck_finding, waited_before
from dsv4ctl.diagnosis.unfinished import unfinished_finding
from dsv4ctl.diagnosis.windows import (
    is_request_error,
    serving_warnings,
    survived_warnings,
    takes_down,
    window_findings,
)
from dsv4ctl.logs.grammars import WRAPPER_RE
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

# When an excerpt has no ready line, the frames of its errors say whether vLLM was starting or serving
# (vllm==0.32.0): the engine's loop (v1/engine/core.py:1547 run_busy_loop, :1603 _process_engine_step, :657 step,
# :698 step_with_batch_queue, :1573 _process_input_queue; v1/worker/gpu_worker.py:1302 execute_model, :1295
# sample_tokens, :1431 execute_dummy_batch) runs only once the engine is up; its start (v1/worker/gpu_worker.py:436
# init_device, :587 load_model, :634 determine_available_memory, :853 initialize_from_config, :908
# compile_or_warm_up_model; v1/worker/gpu_model_runner.py:6133 profile_run, :5508 _dummy_run, :6482 capture_model;
# v1/engine/core.py:261 _initialize_kv_caches) comes before. A start function wins: legacy V0 profiles through
# execute_model.
# The API server building its app once the engine is up (vllm==0.33.0 entrypoints/launchers/api_server/entry.py:
# 135-139, build_app, init_app_state before "Starting vLLM server on"; 0.27.1 entrypoints/openai/api_server.py:189,
# 355; openai/models/serving.py:124 init_static_loras): an error there ends a start whose engine was ready.
APP_BUILD_FUNCTIONS = frozenset({"build_app", "init_app_state", "init_static_loras"})

# What the API server runs after an engine's "init engine … took" line and before it answers: waiting for every
# engine (vllm==0.33.0 v1/engine/utils.py:1206 launch_core_engines, :1403 wait_for_engine_startup; 0.27.1 :1054,
# :1206), building its app, and uvicorn's set-up after "Starting vLLM server on" (vllm==0.33.0
# entrypoints/launchers/launcher.py:177-227 serve_http: config.load(), TLS files included, before the server
# task starts; 0.27.1 entrypoints/launcher.py:26).
SERVER_START_FUNCTIONS = APP_BUILD_FUNCTIONS | {"launch_core_engines", "wait_for_engine_startup", "serve_http"}

SERVING_FUNCTIONS = frozenset({
    "run_busy_loop", "_process_engine_step", "step", "step_with_batch_queue", "_process_input_queue",
    "execute_model", "sample_tokens", "execute_dummy_batch", "run_engine_loop", "engine_step",
})

STARTUP_FUNCTIONS = frozenset({
    "init_device", "load_model", "determine_available_memory", "initialize_from_config", "compile_or_warm_up_model",
    "profile_run", "_dummy_run", "_dummy_sampler_run", "capture_model", "_initialize_kv_caches",
    "determine_num_available_blocks", "create_engine_config", "from_engine_args", *APP_BUILD_FUNCTIONS,
})

# The engine says itself which it was doing when it died (vllm==0.33.0 v1/engine/core.py:1584/1586, 0.27.1
# :1349/1351: "EngineCore failed to start." while it had no engine yet, "EngineCore encountered a fatal error."
# once it ran its loop; v1/engine/async_llm.py:943 "AsyncLLM output_handler failed.", the API server's
# output loop, which only runs once serving); the workers' "WorkerProc failed to start." /
# "WorkerProc initialization failed" (v1/executor/multiproc_executor.py) and the API server's "Engine core
# initialization failed" (v1/engine/utils.py) say it was starting.
PHASE_WORDS: tuple[tuple[str, str], ...] = (
    ("EngineCore encountered a fatal error", "serving"),
    ("output_handler failed", "serving"),
    ("EngineCore failed to start", "startup"),
    ("WorkerProc failed to start", "startup"),
    ("WorkerProc initialization failed", "startup"),
    ("Engine core initialization failed", "startup"),
)

def phase_from_words(
    records: list[ErrorRecord], origin: ErrorRecord | None, hits: list[Hit] = ()
) -> tuple[str | None, PhaseBasis]:
    """"serving" or "startup" as the engine's own wrappers say it (the first that does), else the frames of the
    originating error (else of any error), with the line."""
    for h in sorted(hits, key=lambda h: h.order):
        for words, phase in PHASE_WORDS:
            if words in h.line.message:
                return phase, PhaseBasis("words", evidence_of(h.line), words)
    for pool in ([origin] if origin is not None else [], records):
        for rec in pool:
            startup = rec.functions & STARTUP_FUNCTIONS
            serving = rec.functions & SERVING_FUNCTIONS
            if startup or serving:
                phase = "startup" if startup else "serving"
                word = sorted(startup or serving)[0]
                return phase, PhaseBasis("words", evidence_of(rec.line), f"in {word}")
    return None, PhaseBasis("default")


@dataclass
class _Windows:
    """A start's hits and records sorted by window: before its ready line, after it, after shutdown began."""

    hits: dict[str, dict[str, list[Hit]]]
    noise: list[Hit]
    records: dict[str, list[ErrorRecord]]
    survived: list[ErrorRecord]  # errors the server answered requests after: they did not take it down
    live_startup: list[ErrorRecord]  # errors before ready that can end the start
    answered: list[ErrorRecord]  # errors of a request the server answered
    request_hits: list[Hit]
    request_records: list[ErrorRecord]  # tracebacks of vLLM's request path: one request's error, the server up


def _windows(a: StartAnalyzer) -> _Windows:
    hits: dict[str, dict[str, list[Hit]]] = {"startup": {}, "serving": {}}
    noise: list[Hit] = []
    for h in a.hits:
        sid = h.sig.id
        if sid == "autofit_reduced":
            hits["startup"].setdefault(sid, []).append(h)
            continue
        if sid == "shutdown_noise":
            if h.after_shutdown or "leaked" in h.line.message:
                noise.append(h)
            continue
        w = window_of(a, h.seq)
        if w == "noise":
            noise.append(h)
        else:
            hits[w].setdefault(sid, []).append(h)
    records: dict[str, list[ErrorRecord]] = {"startup": [], "serving": [], "noise": []}
    survived: list[ErrorRecord] = []
    for r in a.records:
        # An error body a client received is the server's answer: it was up. So is an error before a line
        # showing it answer requests.
        if r.kind == "http_error" or (a.alive_seq is not None and r.seq < a.alive_seq):
            survived.append(r)
            continue
        records[window_of(a, r.seq)].append(r)
    # An interrupted start (Ctrl-C, SIGTERM: KeyboardInterrupt) did not fail.
    live_startup = [r for r in records["startup"] if not r.survived and not r.type.endswith("KeyboardInterrupt")]
    # A request's error (a prompt too long, no chat template) is the server answering a request: it was up.
    request_hits = [h for hs in hits["startup"].values() for h in hs if h.sig.role == "request"]
    answered = [r for r in live_startup if any(r.spans(h.line) for h in request_hits)]
    live_startup = [r for r in live_startup if not any(r is x for x in answered)]
    # A traceback raised while the server handled one request (its handlers, a parser, a KV connector's handshake)
    # is that request's: the server was answering, and it stays up unless something after it stops it.
    asgi = asgi_lines(a.records)
    signed = signed_lines(a)
    request_records = [r for r in live_startup + records["serving"] if in_request_path(r, asgi, signed)]
    if request_records and asgi:
        # uvicorn's own line before such a traceback is part of the request's error, not another one.
        live_startup = [r for r in live_startup if (r.line.source, r.line.lineno) not in asgi]
    if request_records:
        live_startup = [r for r in live_startup if not any(r is x for x in request_records)]
        records["serving"] = [r for r in records["serving"] if not any(r is x for x in request_records)]
    return _Windows(hits, noise, records, survived, live_startup, answered, request_hits, request_records)


def _to_serving(w: _Windows, seq: int) -> None:
    """The errors and signature lines before the answer at `seq` belong to the serving window: the server was up to
    answer (an excerpt whose only sign of ready is that answer)."""
    moved = [r for r in w.records["startup"] if r.seq < seq]
    w.records["serving"] += moved
    w.records["startup"] = [r for r in w.records["startup"] if r.seq >= seq]
    w.live_startup = [r for r in w.live_startup if r.seq >= seq]
    for sid, hs in list(w.hits["startup"].items()):
        if sid == "autofit_reduced":
            continue
        before = [h for h in hs if h.seq < seq]
        if before:
            w.hits["serving"].setdefault(sid, []).extend(before)
            w.hits["startup"][sid] = [h for h in hs if h.seq >= seq]
            if not w.hits["startup"][sid]:
                del w.hits["startup"][sid]


def _failed_phase(a: StartAnalyzer, tl: StartupTimeline, w: _Windows) -> tuple[str | None, PhaseBasis]:
    """Which window failed: the startup (an error ended it before ready), or the serving (after ready, an error
    that takes the server down); None when neither did."""
    phase: str | None = None
    basis = PhaseBasis("default")
    if not tl.ready:
        startup_sigs = [sid for sid in w.hits["startup"] if BY_ID[sid].role in ("cause", "symptom")
                        and BY_ID[sid].severity == "critical" and not BY_ID[sid].context]
        # An error record of a shape no grammar knows (an ERROR line in words of its own, a C++ component's E/F record)
        # is a failure dsv4ctl cannot explain, never "no failure seen"; an NCCL WARN line or an error body a client
        # received is not (NCCL prints benign warnings; the server answered the client).
        if startup_sigs or any(not r.weak or r.kind == "log_error" for r in w.live_startup):
            phase = "startup"
            # No ready line in the excerpt: the words of the errors say when it died.
            wrapper_hits = [h for sid in ("engine_core_failed", "shutdown_noise") for h in w.hits["startup"].get(sid, [])]
            worded, basis = phase_from_words(w.live_startup, originating(w.live_startup), wrapper_hits)
            phase = worded or phase
    elif any(takes_down(a, h) for hs in w.hits["serving"].values() for h in hs) or any(
        r.fatal and not is_request_error(r, w.hits["serving"]) for r in w.records["serving"]
    ) or _death_before_answers(a, w):
        phase = "serving"
        basis = PhaseBasis("ready_line", ref_evidence(tl.ready_ref))
    if tl.ready and not tl.answering:
        # Ready rests on an engine's "init engine … took" line, or on "Starting vLLM server on" before uvicorn
        # said its startup is complete: an error raised where the server still starts (waiting for the other
        # engines, building its app, loading uvicorn's config) ended the start.
        building = next((r for r in w.records["serving"] if r.functions & SERVER_START_FUNCTIONS and not r.weak), None)
        if building is not None:
            word = sorted(building.functions & SERVER_START_FUNCTIONS)[0]
            phase, basis = "startup", PhaseBasis("words", evidence_of(building.line), f"in {word}")
    return phase, basis


def _death_before_answers(a: StartAnalyzer, w: _Windows) -> bool:
    """The API server said its engine is gone ("… is already dead, terminating server process") before the answer that
    is this start's only sign of ready, and nothing was answered successfully after it: the server was going down."""
    if a.alive_seq is not None:
        return False
    return any(r.kind == "log_error" and r.fatal for r in w.records["startup"])


def _findings(
    a: StartAnalyzer, tl: StartupTimeline, log: str, w: _Windows, phase: str | None, dsv4: bool
) -> tuple[list[Finding], Finding | None]:
    """Every finding of the start and, when it failed, the root cause (of the window that failed: before the
    ready line, all of an excerpt without one whatever its words say of the phase, or after it)."""
    findings: list[Finding] = []
    root: Finding | None = None
    failed_window = None if phase is None else ("serving" if tl.ready else "startup")
    if failed_window == "startup":
        found, root = window_findings(a, tl, log, w.hits["startup"], w.live_startup, dsv4, "startup")
        findings += found
    else:
        # Startup findings of a start that went on (or of one that did not end): context, never the cause.
        found, _ = window_findings(a, tl, log, w.hits["startup"], [], dsv4, "startup")
        findings += found
        if tl.ready:
            for f in findings:
                if f.severity == "critical":
                    f.details["startup_completed_later"] = True
    if failed_window == "serving":
        found, root = window_findings(a, tl, log, w.hits["serving"], w.records["serving"], dsv4, "serving")
        findings += found
    elif tl.ready:
        findings += serving_warnings(a, tl, log, w.hits["serving"], w.records["serving"])
    if phase is None and w.survived:
        findings += survived_warnings(a, w.survived, findings, tl, log)
    if w.noise:
        findings.append(make_finding(BY_ID["shutdown_noise"], w.noise, {"count": len(w.noise)}))
    if dsv4 and tl.kv_cache_dtype == "auto" and not tl.uses_fp8_ds_mla and tl.available_kv_gib is not None:
        ref = tl.refs.get("engine_config") or tl.refs.get("available_kv")
        findings.append(
            make_finding(BY_ID["kv_cache_dtype_auto_bf16"], [], {"kv_cache_dtype": "auto"}, extra=[line_of(ref)] if ref else [])
        )
    findings += dspark_notes(tl, findings, log) + measured_notes(tl, log)
    return findings, root


_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def conclude_start(a: StartAnalyzer, sources: list[str]) -> Diagnosis:
    """The diagnosis of one start, as its log shows it (what to do about it is `dsv4ctl.advice`'s)."""
    tl = a.tracker.timeline
    if len(sources) <= 1:
        # One source: its own line order is the order; timestamps only matter across files.
        for item in (*a.hits, *a.records):
            item.order = ("", item.seq)
    log = sources[0] if len(sources) == 1 and sources[0] not in ("-", "<stream>") else "<log>"
    w = _windows(a)
    dsv4 = is_dsv4(tl)
    phase, basis = _failed_phase(a, tl, w)
    down = down_after_error(a) if phase in (None, "serving") and tl.ready else None
    if down is not None and phase is None:
        # Requests answered 500/503 after an engine error, and nothing answered otherwise after them: it died serving.
        _to_serving(w, down[0])
        phase, basis = "serving", PhaseBasis("words", evidence_of(down[1]), "answered with a server error after it")
    findings, root = _findings(a, tl, log, w, phase, dsv4)
    if root is not None and root.id in CHAIN_CAUSES:
        _consequence(root, w.live_startup if not tl.ready else w.records["serving"])
    if down is not None and root is not None:
        more = down_details(a, down, root.order[1] if len(root.order) > 1 else None)
        root.details.update(more)
        before = f"; the last request before the error: {more['request_before']}" if "request_before" in more else ""
        root.meaning += (f" The server answered {more['answered']} after it (line {more['answered_line']}, "
                         f"{more['answers_5xx']} such answer(s) and none of another status after them){before}.")
    if root is not None and root.role == "request":
        # The answer found the root error to be one request's (a limit a request passed, its own input): its scope
        # decides, and the server was up to answer it.
        root.severity = "warning"
        phase, root = None, None
    phase, basis, root, stuck = _waits_and_shortages(a, tl, w, findings, phase, basis, root)
    if phase is None and not tl.ready and a.rerun is not None:
        phase, basis, root = _rerun(a, findings)
    for r in w.request_records[:2]:
        if not any(e.source == r.line.source and e.line == r.line.lineno for f in findings for e in f.evidence):
            findings.append(answer_scoped(request_finding(r, a), r, tl, log))
    if (refused := client_finding(a)) is not None:
        findings.append(refused)
    if root is not None and phase is not None and BY_ID[root.id].phase:
        phase = BY_ID[root.id].phase  # e.g. a port that could not be bound: the server never served
    # Without a ready line, a log that shows the server answering a request shows no failure: healthy. One that
    # ends on the auto-fit report has not started yet (the stale-length crash, a capture's hang or kill come
    # after it): inconclusive, with the auto-fit's warning.
    answers = any(r.kind == "http_error" for r in w.survived)
    request_root = any(f.role == "request" and f.details.get("answered_from") for f in findings)
    up = tl.ready or request_root or bool(w.answered) or bool(w.request_hits) or answers or bool(w.request_records)
    if phase and stuck is None:
        verdict = "failed"
    elif stuck is not None and stuck.role != "note":
        verdict = "stuck"
    else:
        verdict = "healthy" if up else "inconclusive"
    if verdict == "inconclusive" and not a.light and (ends := unfinished_finding(a, tl)) is not None:
        findings.append(ends)
    if root is not None:
        root.is_root_cause = True
        if verdict == "failed" and phase == "serving" and tl.ready_ref is not None and "while serving" not in root.meaning:
            # What the root cause cost: a server that was up, not a start.
            root.meaning += f" It came while serving: the server was up (line {tl.ready_ref.line}) before it."
        if verdict == "failed" and phase == "serving":
            _requests_just_before(root, findings)
    findings.sort(key=lambda f: (not f.is_root_cause, _SEVERITY_RANK.get(f.severity, 3), f.order or ("", 0)))
    pre_records = w.live_startup if not tl.ready else []
    answers = []
    if not a.light and (dsv4 or tl.autofit is not None or tl.autofit_full_fit):
        # Asked only where the failure could be the stale-length crash.
        answers = checklist(a, tl, findings, pre_records)
        if not could_be_stale(verdict, phase, root, answers):
            answers = []
    return Diagnosis(
        verdict=verdict,
        findings=findings,
        root_cause=root,
        timeline=tl,
        checklist=answers,
        next_command=None,
        sources=sources,
        phase=phase,
        phase_basis=basis if phase else None,
        facts={"log": log, "stale_fix_active": a.stale_fix_active, "dsv4": dsv4},
    )


def _requests_just_before(root: Finding, findings: list[Finding]) -> None:
    """Requests refused just before a serving failure (within ten lines of it): the requests the engine met last, named
    in the root cause with what their own finding says to do."""
    if not root.evidence:
        return
    lead = root.evidence[0]
    near = [f for f in findings if f.role == "request" and f.evidence and f.evidence[0].source == lead.source
            and 0 < lead.line - f.evidence[0].line <= 10]
    if not near:
        return
    first = near[0].evidence[0]
    root.meaning += (f" Just before it the server refused requests as {near[0].title.lower()} (line {first.line}: "
                     f"{first.text[:120]}): the engine failed on the requests around them.")
    root.actions = [*root.actions, *(a for a in near[0].actions if a not in root.actions)]


def _waits_and_shortages(
    a: StartAnalyzer, tl: StartupTimeline, w: _Windows, findings: list[Finding], phase: str | None,
    basis: PhaseBasis, root: Finding | None,
) -> tuple[str | None, PhaseBasis, Finding | None, Finding | None]:
    """A start whose last evidence is a wait is stuck (`diagnosis.stuck`); a resource warning whose numbers show a
    shortage is the root cause of a failed or stuck start that no error explains, and a certain shortage makes a
    stuck start failed (it cannot go on with what it has). A time-out's error names the wait it ended. Returns the
    phase, its basis, the root cause and the stuck finding (None unless the verdict is stuck)."""
    hits: dict[str, list[Hit]] = {}
    for window in ("startup", "serving"):
        for sid, hs in w.hits[window].items():
            hits.setdefault(sid, []).extend(hs)
    if phase is not None:
        if root is not None and (waited := waited_before(root, a)) is not None:
            line = waited.pop("_line")
            root.details["waited"] = waited
            since = f" since {waited['since']}" if waited["since"] else ""
            root.meaning += (f" The start waited for it{since} (line {waited['since_line']}, logged {waited['count']} "
                             "time(s)) until this time-out ended the wait.")
            if len(root.evidence) < 6 and all(e.line != line.lineno or e.source != line.source for e in root.evidence):
                root.evidence.append(evidence_of(line))
        if root is None or root.role == "symptom" or _only_wraps(root):
            short, _ = shortage_finding(hits, tl, a.waits.get("wait_placement_group"))
            if short is not None:
                root = _replace(findings, short)
        return phase, basis, root, None
    stuck = stuck_finding(a, tl)
    if stuck is None:
        return phase, basis, root, None
    where = "serving" if tl.serving else "startup"
    wait_basis = PhaseBasis("words", stuck.evidence[0], "waits")
    short, certain = shortage_finding(hits, tl, a.waits.get(stuck.details["wait"]))
    if short is not None:
        short.details["stuck"] = {k: stuck.details[k] for k in ("wait", "waiting_for", "since", "last", "timeout")}
        root = _replace(findings, short)
        findings.append(stuck)
        if certain:
            # The wait cannot end but in its time-out's error: the start has failed.
            stuck.severity, stuck.role = "warning", "note"
            stuck.title = f"It waits for {stuck.details['waiting_for']}"
            short.meaning += f" {stuck.details['since_text']} {stuck.details['timeout_text']}"
            return where, PhaseBasis("words", short.evidence[0], "a shortage the warning's numbers show"), root, None
        return where, wait_basis, root, stuck
    findings.append(stuck)
    return where, wait_basis, stuck, stuck


# Records an exception follows from (dsv4ctl/catalogue/signatures_waits.py): the exception logged with or after them
# is their consequence.
CHAIN_CAUSES = frozenset({"trust_remote_code_prompt", "model_inspection_subprocess_failed", "spawn_unguarded_main"})


def _consequence(root: Finding, records: list[ErrorRecord]) -> None:
    """The exception that follows from the root cause's record, in the same process: named in the details and
    quoted after the cause (`EOFError: EOF when reading a line` after transformers' prompt)."""
    if not root.evidence:
        return
    lead = root.evidence[0]
    after = [r for r in records if r.line.source == lead.source and r.line.process == lead.process
             and r.line.lineno >= lead.line - 1 and r.line.lineno != lead.line]
    if not after:
        return
    rec = min(after, key=lambda r: r.line.lineno)
    root.details["consequence"] = rec.origin.text if rec.origin is not None else rec.text
    root.details["consequence_line"] = rec.line.lineno
    root.meaning += f" The exception that follows (line {rec.line.lineno}: {root.details['consequence']}) is its consequence."
    if len(root.evidence) < 6 and all(e.line != rec.line.lineno for e in root.evidence):
        root.evidence.append(evidence_of(rec.line))


def _rerun(a: StartAnalyzer, findings: list[Finding]) -> tuple[str, PhaseBasis, Finding]:
    """The main module ran again after its engine began (`StartAnalyzer.rerun`): a spawned child importing a script
    without `if __name__ == "__main__":` starts a second engine, which Python stops while the child bootstraps."""
    first, again = a.rerun
    f = make_finding(BY_ID["spawn_unguarded_main"], [], {"repeated": first.message, "repeat_line": again.lineno},
                     extra=[first, again])
    f.meaning += (f" Here the config line '{first.message}' (line {first.lineno}) is printed again at line "
                  f"{again.lineno} by the same process after the engine began and before any weights: the main module "
                  "ran a second time.")
    f.order = ("", first.lineno)
    findings.append(f)
    return "startup", PhaseBasis("words", evidence_of(again), "the main module ran again"), f


def _only_wraps(root: Finding) -> bool:
    """A root cause that only names a wrapper (an unrecognized or indexed error whose line repeats an error printed
    elsewhere: `Engine core initialization failed`, `EngineCore failed to start`), or a native record (a C++ component's
    own E line) a resource warning may explain."""
    if root.id not in ("unrecognized_error", "indexed_error") or not root.evidence:
        return False
    text = root.evidence[0].text
    # A process killed by SIGBUS touched a shared segment that had no room: the shortage explains it.
    bus = root.details.get("kind") in ("crash", "killed") and ("Bus error" in text or "SIGBUS" in text)
    # frames alone, the exception line cut off: it says where, not what; a shortage the log's numbers show says what
    fragment = root.details.get("shown_by") == "frame"
    return bus or fragment or root.details.get("kind") == "native" or bool(WRAPPER_RE.search(text))


def _replace(findings: list[Finding], f: Finding) -> Finding:
    """`f` in place of the note of the same signature among `findings` (it becomes the root cause), and of an
    unnamed error quoting the same line."""
    lead = (f.evidence[0].source, f.evidence[0].line) if f.evidence else None
    findings[:] = [x for x in findings if x.id != f.id and not (
        x.id in ("unrecognized_error", "indexed_error") and x.evidence and (x.evidence[0].source, x.evidence[0].line) == lead)]
    findings.append(f)
    return f


def not_a_vllm_log(sources: list[str], lines_read: int, selected: int) -> Diagnosis:
    sig = BY_ID["not_a_vllm_log"]
    details = {"lines_read": lines_read}
    title, meaning = sig.title, fill(sig.meaning, details) or sig.meaning
    if lines_read == 0:
        details["empty"] = True
        title, meaning = "The input is empty", "The input holds no line at all, so there is no start to diagnose."
    f = Finding(
        id=sig.id, severity=sig.severity, title=title, meaning=meaning,
        evidence=[], details=details, actions=list(sig.actions), role=sig.role,
    )
    return Diagnosis(
        verdict="inconclusive", findings=[f], root_cause=None, timeline=StartupTimeline(), checklist=[],
        next_command=None, sources=sources, lines_examined=selected, lines_read=lines_read,
    )
