"""The upgrade view's core on the real tables: the plan under each release as planning makes it, the fixes' needs per
release, the flags table's changes for the launch, the message index's differences, the log-lines table (a fixture
of its schema), and the refusals of a release that cannot be compared."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fitkit import FLASH, h200, no_hf_cache, snapshot  # noqa: F401 - autouse fixture

from dsv4ctl.catalogue import message_index, vllm_flags
from dsv4ctl.errors import UsageError
from dsv4ctl.fixes.base import DEEPGEMM_METADATA_CLAMP, FIX_NAMES, STALE_MAX_MODEL_LEN
from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.upgrade import SCHEMA_VERSION, compare_releases, launch_flags_of_argv, launch_flags_of_request
from dsv4ctl.upgrade import fix_releases, flags, log_lines, messages

LINES = Path(__file__).resolve().parents[1] / "data" / "upgrade" / "vllm_log_lines.json"
CHECKPOINT = 160 * 10**9


@pytest.fixture(scope="module")
def eight_h200():
    return snapshot(*(h200(i) for i in range(8)))


def _request(release: str, **kw) -> FitRequest:
    return FitRequest(model=FLASH, tensor_parallel_size=8, vllm_version=release, no_calibration=True,
                      checkpoint_bytes=CHECKPOINT, **kw)


@pytest.fixture(scope="module")
def view_32_33(eight_h200):
    return compare_releases(_request("0.32.0"), "0.33.0", snapshot=eight_h200, log_lines_path=str(LINES))


def test_each_release_is_planned_as_planning_plans_it(view_32_33, eight_h200):
    for side, release in ((view_32_33.before, "0.32.0"), (view_32_33.after, "0.33.0")):
        alone = plan_fit(_request(release), snapshot=eight_h200)
        assert side.planned == release == alone.version.planned
        assert side.autofit_max_model_len == alone.autofit_max_model_len
        assert side.recommended_max_model_len == alone.recommended_max_model_len
        assert side.kv_cache_memory_bytes == alone.kv_cache_memory_bytes
        assert side.vllm_flags == alone.vllm_flags
        assert side.verdict == alone.verdict
        info = vllm_flags.flag("--gpu-memory-utilization", release)
        assert side.utilization_default_recorded and side.utilization_default == info.default


def test_flags_added_are_the_tables_difference(view_32_33):
    old = {o for o in vllm_flags.option_strings("0.32.0") if o.startswith("--") and not o.startswith("--no-")}
    new = {o for o in vllm_flags.option_strings("0.33.0") if o.startswith("--") and not o.startswith("--no-")}
    expected = sorted(o for o in new - old if vllm_flags.flag(o, "0.32.0") is None)
    assert view_32_33.flags.recorded and list(view_32_33.flags.added) == expected
    assert expected  # 0.33.0 adds flags: the view shows a real difference
    assert all(vllm_flags.flag(o, "0.33.0") is not None for o in view_32_33.flags.added)


def test_messages_are_the_indexs_difference_by_text(view_32_33):
    vllm = [e for e in message_index.entries() if e.package == "vllm"]
    texts = {r: {e.template for e in vllm if r in e.releases} for r in ("0.32.0", "0.33.0")}
    appeared = [e for e in vllm if "0.33.0" in e.releases and "0.32.0" not in e.releases
                and e.template not in texts["0.32.0"]]
    vanished = [e for e in vllm if "0.32.0" in e.releases and "0.33.0" not in e.releases
                and e.template not in texts["0.33.0"]]
    m = view_32_33.messages
    assert (m.appeared, m.vanished) == (len(appeared), len(vanished)) and m.appeared > 0 and m.vanished > 0
    assert m.family == "deepseek_v4"
    assert m.relevant_appeared or m.relevant_vanished
    for note in (*m.relevant_appeared, *m.relevant_vanished):
        if note.why == "model":  # the family's folder, not another accelerator's subfolder (the GPUs are NVIDIA)
            assert "vllm/models/deepseek_v4/" in note.where and "/amd/" not in note.where
        else:
            assert note.why.startswith("flag --")
    assert len(m.relevant_appeared) + len(m.relevant_vanished) < (m.appeared + m.vanished) / 10  # not a dump


def test_fixes_follow_the_releases_code(view_32_33):
    rows = {row.name: row for row in view_32_33.fixes}
    assert set(rows) == set(FIX_NAMES)
    for row in rows.values():
        assert row.before == fix_releases.fix_need(row.name, "0.32.0")
        assert row.after == fix_releases.fix_need(row.name, "0.33.0")
    assert rows[STALE_MAX_MODEL_LEN].path.applies is True  # --max-model-len auto
    assert rows[DEEPGEMM_METADATA_CLAMP].path.applies is True  # H200: SM90


def test_a_fix_whose_need_changes_is_shown_changed(eight_h200):
    view = compare_releases(_request("0.27.1", max_model_len=500_000, explicit=frozenset({"max_model_len"})),
                            "0.30.0", snapshot=eight_h200)
    rows = {row.name: row for row in view.fixes}
    assert rows[DEEPGEMM_METADATA_CLAMP].changed
    assert (rows[DEEPGEMM_METADATA_CLAMP].before.status, rows[DEEPGEMM_METADATA_CLAMP].after.status) == (
        fix_releases.NEEDED, fix_releases.NOT_NEEDED)
    assert rows[STALE_MAX_MODEL_LEN].path.applies is False  # an explicit length is never lowered
    assert any(f.option == "--max-model-len" and f.given and f.value == "500000" for f in view.launch)


def test_no_fix_range_reaches_past_the_releases_read():
    for name in FIX_NAMES:
        need = fix_releases.fix_need(name, "9.0.0")
        assert need.status == fix_releases.NOT_RECORDED and need.where is None
        assert fix_releases.fix_need(name, "0.26.0").status == fix_releases.NOT_RECORDED


WHEELS = Path("/work/wheels/src")


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the releases' sources are not unpacked here")
def test_the_stale_length_rows_match_the_releases_sources():
    read = 0
    for tree in sorted(WHEELS.glob("vllm-*")):
        release = tree.name.removeprefix("vllm-")
        interface = tree / "vllm/v1/worker/gpu/model_states/interface.py"
        need = fix_releases.fix_need(STALE_MAX_MODEL_LEN, release)
        if need.status == fix_releases.NOT_RECORDED or not interface.is_file():
            continue
        prop = re.search(r"@property\s+def max_model_len\(", interface.read_text(encoding="utf-8")) is not None
        assert (need.status == fix_releases.NOT_NEEDED) == prop, release
        read += 1
    assert read


def _default_change() -> tuple[str, str, str]:
    """A flag of the table whose literal default differs between two releases that both record one."""
    releases = vllm_flags.releases()
    for a, b in zip(releases, releases[1:]):
        for option in sorted(o for o in vllm_flags.option_strings(a) if o.startswith("--") and not o.startswith("--no-")):
            before, after = vllm_flags.flag(option, a), vllm_flags.flag(option, b)
            if before and after and before.name == option and before.has_default and after.has_default \
                    and before.default != after.default:
                return option, a, b
    raise AssertionError("no default changes in the table")


def test_a_new_default_reaches_a_launch_that_leaves_the_flag():
    option, a, b = _default_change()
    left = flags.flags_diff((flags.LaunchFlag(option, None, False),), a, b)
    (change,) = left.launch
    assert change.change == flags.NEW_DEFAULT and not change.given
    assert change.before == str(vllm_flags.flag(option, a).default)
    passed = flags.flags_diff((flags.LaunchFlag(option, "x", True),), a, b)
    assert passed.launch[0].given  # shown, but the launch passes it: the new default does not reach it


def test_a_flag_the_other_release_lacks_is_removed():
    releases = vllm_flags.releases()
    for a, b in zip(releases, releases[1:]):
        gone = sorted(set(vllm_flags.option_strings(a)) - set(vllm_flags.option_strings(b)))
        gone = [o for o in gone if o.startswith("--") and not o.startswith("--no-") and vllm_flags.flag(o, b) is None]
        if gone:
            break
    else:
        pytest.skip("no release of the table removes a flag")
    diff = flags.flags_diff(launch_flags_of_argv(["model", gone[0], "1"], a), a, b)
    assert [c.change for c in diff.launch if c.option == gone[0]] in (["removed"], ["renamed"])
    assert gone[0] in diff.removed or any(c.change == "renamed" for c in diff.launch)


def test_a_release_the_flags_table_lacks_is_not_recorded():
    diff = flags.flags_diff((), "0.32.0", "9.1.0")
    assert not diff.recorded and "9.1.0" in diff.note and diff.added == ()


def test_launch_flags_of_a_request_and_of_an_argv():
    request = _request("0.32.0", gpu_memory_utilization=0.8, explicit=frozenset({"gpu_memory_utilization"}))
    by_option = {f.option: f for f in launch_flags_of_request(request)}
    assert by_option["--gpu-memory-utilization"] == flags.LaunchFlag("--gpu-memory-utilization", "0.8", True)
    assert by_option["--tensor-parallel-size"].given and by_option["--tensor-parallel-size"].value == "8"
    assert not by_option["--max-model-len"].given  # auto, vLLM's default
    argv = launch_flags_of_argv([FLASH, "-tp", "8", "--kv-cache-dtype=fp8", "--enable-expert-parallel"], "0.33.0")
    by_option = {f.option: f for f in argv}
    assert by_option["--tensor-parallel-size"].value == "8"
    assert by_option["--kv-cache-dtype"].value == "fp8"
    assert by_option["--enable-expert-parallel"] == flags.LaunchFlag("--enable-expert-parallel", None, True)
    assert not by_option["--max-model-len"].given


@pytest.mark.parametrize("architecture,family", [("DeepseekV4ForCausalLM", "deepseek_v4"),
                                                  ("DeepseekV41ForCausalLM", "deepseek_v41")])
def test_on_nvidia_no_message_cites_another_accelerators_subfolder(architecture, family):
    # 0.33.0 -> 0.34.0: the MTP "weights missing" message is in amd/, nvidia/ and xpu/ mtp.py of deepseek_v4; the
    # V4.1 folder's amd/model.py and amd/vl_model.py messages have nvidia/ twins. Each is cited where NVIDIA runs it.
    others = messages.OTHER_PLATFORMS["nvidia"]
    diff = messages.messages_diff("0.33.0", "0.34.0", architecture=architecture, options=set(), platform="nvidia")
    notes = (*diff.relevant_appeared, *diff.relevant_vanished)
    assert diff.family == family and notes
    for note in notes:
        path = note.where.split(" ", 1)[1]
        parts = path.split("/")
        assert parts[3] not in others, note.where
    unknown = messages.messages_diff("0.33.0", "0.34.0", architecture=architecture, options=set(), platform=None)
    cited = {n.where.split(" ", 1)[1].split("/")[3] for n in (*unknown.relevant_appeared, *unknown.relevant_vanished)}
    assert cited & set(others)  # GPUs not known: another accelerator's code is not left out


def test_family_of_an_architecture():
    assert messages.family_of("DeepseekV4ForCausalLM") == "deepseek_v4"
    assert messages.family_of("DeepseekV41ForCausalLM") == "deepseek_v41"
    assert messages.family_of(None) is None


def test_a_release_the_message_index_lacks_is_not_recorded():
    diff = messages.messages_diff("0.32.0", "9.1.0", architecture="DeepseekV4ForCausalLM", options=set(), platform=None)
    assert not diff.recorded and "9.1.0" in diff.note


def test_log_lines_gone_reworded_and_new():
    diff = log_lines.log_lines_diff("0.33.0", "0.34.0", LINES)
    table = json.loads(LINES.read_text())["releases"]
    changes = {c.key: c for c in diff.changes}
    assert changes["v2_runner"].change == log_lines.GONE and changes["v2_runner"].before == table["0.33.0"]["v2_runner"]["text"]
    assert changes["autofit"].change == log_lines.REWORDED and changes["autofit"].after == table["0.34.0"]["autofit"]["text"]
    assert changes["extended_kv"].change == log_lines.NEW
    assert "available_kv" not in changes  # the same text on another line: a scraper still finds it
    assert [c.key for c in diff.missed] == ["v2_runner", "autofit"]


def test_log_lines_not_recorded(tmp_path):
    missing = log_lines.log_lines_diff("0.32.0", "0.33.0", tmp_path / "none.json")
    assert not missing.recorded and missing.note.startswith("not recorded")
    other = log_lines.log_lines_diff("0.32.0", "9.1.0", LINES)
    assert not other.recorded and "9.1.0" in other.note
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"schema_version": 2, "releases": {}}))
    assert not log_lines.log_lines_diff("0.32.0", "0.33.0", wrong).recorded


def test_the_view_reads_the_log_lines_table(view_32_33):
    assert view_32_33.log_lines.recorded and view_32_33.log_lines.missed == ()  # 0.33.0 prints 0.32.0's lines


def test_json_has_a_schema_version_and_round_trips(view_32_33):
    data = json.loads(json.dumps(view_32_33.to_json()))
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["from"]["planned"] == "0.32.0" and data["to"]["planned"] == "0.33.0"
    assert data["startup_plan_schema"] == {"from": view_32_33.before.plan_schema, "to": view_32_33.after.plan_schema}
    assert {f["name"] for f in data["fixes"]} == set(FIX_NAMES)


@pytest.mark.parametrize("to, words", [
    ("0.32", "the same release"),
    ("0.32.0", "the same release"),
    ("0.32.4", "planned as 0.32.0"),
    ("latest", "not a vLLM version"),
    ("0.20.0", "--compare 0.20.0"),
    ("9.1.0", "has not read vLLM 9.1.0"),
])
def test_releases_that_cannot_be_compared_are_refused(eight_h200, to, words):
    with pytest.raises(UsageError) as err:
        compare_releases(_request("0.32.0"), to, snapshot=eight_h200)
    assert words in err.value.message
    assert "\n" not in err.value.message


def test_the_view_before_an_upgrade_to_0_34_on_eight_h200(eight_h200):
    # What an operator asks before 0.33.0 -> 0.34.0 with DeepSeek-V4-Flash on 8 x H200, read from the shipped tables
    # (log lines: the catalogue's own file): the sizing mode, the utilization default, the fixes, the flags added, the
    # lines a scraper may miss, the plan schema.
    from dsv4ctl.catalogue import vllm_log_lines
    from dsv4ctl.planning import startup_plans

    view = compare_releases(_request("0.33.0"), "0.34.0", snapshot=eight_h200)
    assert (view.before.sizing_mode, view.after.sizing_mode) == ("estimate", "measured")
    for side, release in ((view.before, "0.33.0"), (view.after, "0.34.0")):
        assert side.utilization_default == vllm_flags.flag("--gpu-memory-utilization", release).default
    assert view.before.utilization_default != view.after.utilization_default
    needs = {row.name: (row.before.status, row.after.status) for row in view.fixes}
    assert needs == {name: (fix_releases.fix_need(name, "0.33.0").status, fix_releases.fix_need(name, "0.34.0").status)
                     for name in FIX_NAMES}
    assert needs["flashmla-empty-prefill-chunk"][1] == fix_releases.NEEDED
    assert needs[STALE_MAX_MODEL_LEN][1] == needs[DEEPGEMM_METADATA_CLAMP][1] == fix_releases.NOT_NEEDED
    old = {o for o in vllm_flags.option_strings("0.33.0") if o.startswith("--") and not o.startswith("--no-")}
    new = {o for o in vllm_flags.option_strings("0.34.0") if o.startswith("--") and not o.startswith("--no-")}
    assert "--enable-extensible-kv-cache" in view.flags.added
    assert set(view.flags.added) == {o for o in new - old if vllm_flags.flag(o, "0.33.0") is None}
    assert any(c.option == "--gpu-memory-utilization" for c in view.flags.launch)
    gone = {c.key for c in view.log_lines.changes if c.change == log_lines.GONE}
    assert gone == {k for k in vllm_log_lines.keys() if vllm_log_lines.prints(k, "0.33.0")
                    and vllm_log_lines.prints(k, "0.34.0") is False}
    assert "v2_runner" in gone
    assert (view.before.plan_schema, view.after.plan_schema) == (startup_plans.schemas_of("0.33.0")[0],
                                                                 startup_plans.schemas_of("0.34.0")[0])
