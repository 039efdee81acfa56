"""The ecosystem part of diagnose's catalogue: messages of torch/NCCL, the CUDA runtime, Ray,
huggingface_hub, transformers and the OS, each with a fixture log per wording.

Fixtures: tests/fixtures/logs/catalogue/eco_<id>.log or eco_<id>__<wording>.log (written by
eco_generate.py in that folder from the unpacked package sources).
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from dsv4ctl.diagnosis.evidence import fill
from dsv4ctl.logs import prefilter
from dsv4ctl.catalogue import signatures as signatures_module
from dsv4ctl.logs.reader import iter_log_lines
from dsv4ctl.catalogue.signatures import CATALOGUE
from dsv4ctl.catalogue.signatures_ecosystem import SIGNATURES

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
CATALOGUE_DIR = FIXTURES / "catalogue"
HEALTHY = [
    FIXTURES / "healthy_explicit_len.log",
    FIXTURES / "real_v032_cpu_healthy.log",
    ROOT / "dsv4ctl" / "examples" / "healthy.log",
]
BY_ID = {s.id: s for s in SIGNATURES}
FIXTURE_PATHS = sorted(CATALOGUE_DIR.glob("eco_*.log"))

# Where each signature's text is, as data: (file under the package's unpacked tree, line, a fragment of
# the message on that line). Binaries (no line) are checked for the fragment's bytes.
WHEELS = Path("/work/wheels")
PACKAGE_ROOTS = {
    "vllm": lambda v: WHEELS / "src" / f"vllm-{v}",
    "torch": lambda v: WHEELS / "other" / f"torch-{v}",
    "ray": lambda v: WHEELS / "other" / f"ray-{v}",
    "huggingface_hub": lambda v: WHEELS / "other" / f"huggingface_hub-{v}",
    "transformers": lambda v: WHEELS / "other" / f"transformers-{v}",
    "nvidia-nccl-cu13": lambda v: WHEELS / "other" / f"nvidia-nccl-cu13-{v}",
    "nvidia-cuda-runtime": lambda v: WHEELS / "other" / f"nvidia-cuda-runtime-{v}",
    "glibc": lambda v: Path("/"),
    "linux-source-6.1": lambda v: WHEELS / "other" / f"linux-source-6.1-{v}",
    "containerd": lambda v: WHEELS / "other" / f"containerd-{v}",
    "kubernetes-client": lambda v: WHEELS / "other" / f"kubernetes-client-{v}",
}
FRAGMENTS: dict[str, list[str]] = {
    "eco_nccl_watchdog_timeout": ["Watchdog caught collective operation timeout: "],
    "eco_nccl_system_error": ["unhandled system error", "NCCL error: "],
    "eco_nccl_internal_error": ["internal error - please report this issue to the NCCL developers", "NCCL error: "],
    "eco_nccl_invalid_usage": ["invalid usage", "NCCL error: "],
    "eco_nccl_remote_error": ["remote process exited or there was a network error", "NCCL error: "],
    "eco_shm_insufficient": ["Insufficient space in", "Error: failed to extend %s to %ld bytes",
                             "Error while %s shared memory segment %s"],
    "eco_worker_sigbus": ["died unexpectedly (exit code: %s)", "Failed core proc(s): "],
    "eco_host_oom_killed": ["died unexpectedly (exit code: %s)", "Failed core proc(s): "],
    "eco_cuda_no_kernel_image": ["no kernel image is available for execution on the device"],
    "eco_nccl_cuda_oom": ["Cuda failure %d '%s'", "out of memory"],
    "eco_cuda_ecc_error": ["uncorrectable ECC error encountered"],
    "eco_cuda_device_busy": ["CUDA-capable device(s) is/are busy or unavailable"],
    "eco_cuda_device_assert": ["device-side assert triggered"],
    "eco_cublas_error": ["when calling `cublasCreate(handle)`", "CUBLAS_STATUS_ALLOC_FAILED"],
    "eco_ray_oom_killed": [" Workers (tasks / actors) killed due to memory pressure (OOM), ",
                           "worker(s) were killed due to the node running low on memory",
                           "Task was killed due to the node running low on memory."],
    "eco_ray_worker_system_error": ["A worker died or was killed while executing a task by an unexpected system error."],
    "eco_kernel_oom_kill": ["Killed process %d (%s)"],
    "eco_container_oom_killed": ["OOMKilled", "Last State", "Exit Code:"],
    "eco_ray_actor_died": ["The actor died unexpectedly before finishing this task.",
                           "The actor is dead because its worker process has died. Worker exit type: "],
    "eco_ray_placement_group": ["Cannot provide a placement group", "is not included in a placement",
                                "Current node has no"],
    "eco_hf_gated_repo": ["Cannot access gated repo for url", "You are trying to access a gated repo."],
    "eco_hf_repo_not_found": ["Repository Not Found for url"],
    "eco_hf_offline_not_cached": ["Cannot find an appropriate cached snapshot folder"],
    "eco_hf_invalid_token": ["Invalid credentials in Authorization header"],
    "eco_hf_token_forbidden": [" Forbidden: {error_message}.", "Make sure your token has the correct permissions."],
    "eco_hf_rate_limited": ["429 Too Many Requests"],
    "eco_hf_revision_not_found": ["Revision Not Found for url"],
    "eco_transformers_unknown_model_type": ["but Transformers does not recognize this architecture"],
    "eco_too_many_open_files": ["[Errno 24] Too many open files", "Too many open files"],
    "eco_no_space_left": ["Not enough free disk space to download the file", "No space left on device"],
}
# Each fixture's cause line holds this text (the evidence diagnose must quote first).
EVIDENCE = {
    "eco_nccl_watchdog_timeout": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2",
    "eco_nccl_watchdog_timeout__serving": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213",
    "eco_nccl_system_error": "RuntimeError: NCCL error: unhandled system error",
    "eco_nccl_internal_error": "RuntimeError: NCCL error: internal error",
    "eco_nccl_invalid_usage": "RuntimeError: NCCL error: invalid usage",
    "eco_nccl_remote_error": "RuntimeError: NCCL error: remote process exited",
    "eco_nccl_cuda_oom": "NCCL WARN Cuda failure 2 'out of memory'",
    "eco_shm_insufficient__nccl_extend": "NCCL WARN Error: failed to extend /dev/shm/nccl-",
    "eco_shm_insufficient__nccl_create": "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-",
    "eco_shm_insufficient__vllm_v032": "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation",
    "eco_shm_insufficient__vllm_v027": "RuntimeError: Insufficient space in /dev/shm: 160 MiB required",
    "eco_worker_sigbus__worker": "died unexpectedly (exit code: -7)",
    "eco_worker_sigbus__engine_core": "Failed core proc(s): {'EngineCore': -7}",
    "eco_host_oom_killed__worker": "died unexpectedly (exit code: -9)",
    "eco_host_oom_killed__engine_core": "Failed core proc(s): {'EngineCore': -9}",
    "eco_cuda_no_kernel_image": "torch.AcceleratorError: CUDA error: no kernel image is available",
    "eco_cuda_ecc_error": "torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered",
    "eco_cuda_device_busy": "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy",
    "eco_cuda_device_assert": "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "eco_cuda_device_assert__serving": "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "eco_cublas_error": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling",
    "eco_ray_oom_killed__summary": "Workers (tasks / actors) killed due to memory pressure (OOM)",
    "eco_ray_oom_killed__kill": "worker(s) were killed due to the node running low on memory",
    "eco_ray_oom_killed__task_ray248": "Worker exit detail: Task was killed due to the node running low on memory.",
    "eco_ray_actor_died": "ActorDiedError: The actor died unexpectedly before finishing this task.",
    "eco_ray_worker_system_error": "A worker died or was killed while executing a task by an unexpected system error.",
    "eco_kernel_oom_kill": "Out of memory: Killed process 4242 (VLLM::Worker_TP)",
    "eco_container_oom_killed": "Reason:       OOMKilled",
    "eco_ray_placement_group__timeout": "ValueError: Cannot provide a placement group requiring 8 GPUs",
    "eco_ray_placement_group__driver_node": "is not included in a placement group",
    "eco_ray_placement_group__no_gpu_on_driver": "ValueError: Current node has no GPU available. current_node_resource=",
    "eco_hf_gated_repo": "You are trying to access a gated repo.",
    "eco_hf_repo_not_found": "Repository Not Found for url",
    "eco_hf_offline_not_cached": "Cannot find an appropriate cached snapshot folder",
    "eco_hf_invalid_token": "Invalid credentials in Authorization header",
    "eco_hf_token_forbidden": "403 Forbidden: Please enable access to public gated repositories",
    "eco_hf_rate_limited__quota": "429 Too Many Requests: you have reached your 'api' rate limit.",
    "eco_hf_rate_limited__url": "429 Too Many Requests for url",
    "eco_hf_revision_not_found": "Revision Not Found for url",
    "eco_transformers_unknown_model_type": "has model type `custom_moe` but Transformers does not recognize",
    "eco_too_many_open_files": "OSError: [Errno 24] Too many open files",
    "eco_no_space_left__download": "Not enough free disk space to download the file",
    "eco_no_space_left__compile_cache": "OSError: [Errno 28] No space left on device",
}


def sig_id_of(path: Path) -> str:
    return path.stem.split("__")[0]


def ids(paths):
    return [p.stem for p in paths]


def first_hit(path: Path, sig):
    for line in iter_log_lines([path]):
        if sig.match(line.message):
            return line
    return None


def test_the_part_has_at_least_fourteen_signatures_with_unique_ids():
    assert len(SIGNATURES) >= 14
    assert len(BY_ID) == len(SIGNATURES)
    assert all(s.id.startswith("eco_") for s in SIGNATURES)
    others = [s.id for s in CATALOGUE if s not in SIGNATURES]
    assert not set(BY_ID) & set(others)
    assert len(set(others)) == len(others)
    assert all(s.severity == "critical" and s.role == "cause" and s.tier in (0, 1) for s in SIGNATURES)


def test_every_signature_has_a_fixture_and_every_fixture_an_expected_cause_line():
    assert {sig_id_of(p) for p in FIXTURE_PATHS} == set(BY_ID)
    assert {p.stem for p in FIXTURE_PATHS} == set(EVIDENCE)
    for p in FIXTURE_PATHS:
        assert len(p.read_text(encoding="utf-8").splitlines()) < 120, p.name


def test_fixture_headers_cite_a_source_and_are_not_log_lines():
    for p in FIXTURE_PATHS:
        lines = p.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# ") and "==" in lines[0], p.name
        for line in lines:
            if line.startswith("#"):
                assert not prefilter.line_matches(line), (p.name, line)


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=ids(FIXTURE_PATHS))
def test_exactly_the_intended_signature_matches_the_cause_line(path):
    sig = BY_ID[sig_id_of(path)]
    hit = first_hit(path, sig)
    assert hit is not None
    assert EVIDENCE[path.stem] in hit.message
    # No other signature of this part that could outrank it (same or more specific tier) matches that
    # line or an earlier one.
    for line in iter_log_lines([path]):
        others = [s.id for s in SIGNATURES if s is not sig and s.tier <= sig.tier and s.match(line.message)]
        assert not others, (line.lineno, others)
        if line.lineno == hit.lineno:
            break
    # Every line the signature matches is one the prefilter selects.
    for line in iter_log_lines([path]):
        if sig.match(line.message):
            assert prefilter.line_matches(line.raw), line.raw


@pytest.mark.parametrize("path", HEALTHY, ids=[p.name for p in HEALTHY])
def test_no_signature_matches_a_healthy_start(path):
    for line in iter_log_lines([path]):
        assert not [s.id for s in SIGNATURES if s.match(line.message)], line.raw


def test_placeholders_are_always_filled():
    """Meaning placeholders are named groups of every pattern; action placeholders of some pattern (or {model})."""
    fmt = string.Formatter()
    for s in SIGNATURES:
        groups = [set(re.compile(p).groupindex) for p in s.patterns]
        for text in (s.title, s.meaning):
            for _, name, _, _ in fmt.parse(text):
                if name is not None:
                    assert all(name in g for g in groups), (s.id, name)
        for action in s.actions:
            for _, name, _, _ in fmt.parse(action):
                if name is not None:
                    assert name == "model" or any(name in g for g in groups), (s.id, name)
            assert fill(action, {"model": "deepseek-ai/DeepSeek-V4-Flash", **{n: "X" for g in groups for n in g}})


SOURCE_RE = re.compile(r"^(?P<pkg>[A-Za-z0-9_.-]+)==(?P<ver>[0-9][0-9A-Za-z.+]*) (?P<path>\S+?)(?::(?P<line>[0-9]+)| \((?P<unit>[^)]+)\))$")


def source_entries(sig):
    return [e.strip() for e in sig.source.split(";")]


def test_every_source_names_package_version_and_place():
    for s in SIGNATURES:
        for entry in source_entries(s):
            assert SOURCE_RE.match(entry), (s.id, entry)


def test_cited_lines_hold_the_message():
    """Strong check, where the unpacked packages are present (not in CI): each cited line (or binary) has the text."""
    checked = 0
    for s in SIGNATURES:
        for entry in source_entries(s):
            m = SOURCE_RE.match(entry)
            root = PACKAGE_ROOTS[m["pkg"]](m["ver"])
            path = root / m["path"].lstrip("/") if m["pkg"] != "glibc" else Path(m["path"])
            if not root.is_dir() or (m["pkg"] == "glibc" and not path.exists()):
                continue  # this package is not unpacked here
            assert path.is_file(), (s.id, entry)
            checked += 1
            if m["line"]:
                text = path.read_text(encoding="utf-8").splitlines()[int(m["line"]) - 1]
                assert any(f in text for f in FRAGMENTS[s.id]), (s.id, entry, text)
            else:
                data = path.read_bytes()
                assert any(f.encode() in data for f in FRAGMENTS[s.id]), (s.id, entry)
    if not checked:
        pytest.skip("unpacked package sources not present")


@pytest.fixture
def spliced():
    """diagnose with this part of the catalogue in place (it is spliced into the registry: checked here)."""
    from dsv4ctl.advice import diagnose

    registered = {s.id for s in signatures_module.CATALOGUE}
    assert all(s.id in registered for s in SIGNATURES)
    return diagnose


def _check_diagnosis(diagnosis, path):
    sig = BY_ID[sig_id_of(path)]
    assert diagnosis.verdict == "failed"
    root = diagnosis.root_cause
    assert getattr(root, "id", root) == sig.id
    top = diagnosis.findings[0]
    assert top.id == sig.id
    assert top.evidence[0].line == first_hit(path, sig).lineno
    assert EVIDENCE[path.stem] in top.evidence[0].text


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=ids(FIXTURE_PATHS))
def test_diagnose_with_this_part_spliced_in_names_it_as_the_root_cause(path, spliced):
    diagnosis = spliced([path])
    _check_diagnosis(diagnosis, path)
    # The __serving fixtures fail after the server was ready: those signatures are fatal.
    if path.stem.endswith("__serving"):
        assert BY_ID[sig_id_of(path)].fatal
        assert getattr(diagnosis, "phase", "serving") == "serving"


def _root(spliced, name):
    diagnosis = spliced([CATALOGUE_DIR / f"{name}.log"])
    return diagnosis.findings[0]


def test_named_groups_fill_the_details_meaning_and_actions(spliced):
    oom = _root(spliced, "eco_ray_oom_killed__summary")
    assert oom.details["node_ip"] == "10.0.0.2"
    assert "See what the memory monitor killed and why: ray logs raylet.out -ip 10.0.0.2" in oom.actions
    assert _root(spliced, "eco_ray_oom_killed__kill").details["node_ip"] == "10.0.0.2"
    cublas = _root(spliced, "eco_cublas_error")
    assert cublas.details["cublas_status"] == "CUBLAS_STATUS_ALLOC_FAILED"
    assert cublas.meaning.startswith("A cuBLAS call returned CUBLAS_STATUS_ALLOC_FAILED.")
    unknown = _root(spliced, "eco_transformers_unknown_model_type")
    assert unknown.details["model_type"] == "custom_moe"
    assert "model_type `custom_moe`" in unknown.meaning
    watchdog = _root(spliced, "eco_nccl_watchdog_timeout")
    assert (watchdog.details["op_type"], watchdog.details["timeout_ms"]) == ("ALLREDUCE", "600000")
    missing = _root(spliced, "eco_hf_repo_not_found")
    assert "Check the model id (organisation/name, case included): hf models info deepseek-ai/DeepSeek-V4-Flsh" in missing.actions


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=ids(FIXTURE_PATHS))
def test_diagnose_names_it_as_the_root_cause(path):
    from dsv4ctl.advice import diagnose

    _check_diagnosis(diagnose([path]), path)
