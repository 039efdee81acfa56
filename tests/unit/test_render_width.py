"""Every table at 80 and 120 columns: identical GPUs on one row, every figure of the JSON form whole in
the text (no `…`, no cut cell), no line past the width but an unbreakable command."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from dsv4ctl.render.tables import fit_table, index_ranges, pack, print_table
from dsv4ctl.units import format_gib, format_tokens, gib

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
REPO = Path(__file__).resolve().parents[2]
GPUS = REPO / "tests" / "fixtures" / "gpus"
X8 = GPUS / "h200x8-snapshot.json"
MIXED = GPUS / "h200x8-mixed-snapshot.json"  # cuda:3 has 4 GiB less free memory
WIDTHS = (80, 120)
WEIGHTS = ("--weights-memory", "20GiB")  # per GPU: a prediction without the checkpoint


def _run(cli, width: int, *args: str):
    result = cli(*args, env={"COLUMNS": str(width), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result


def _assert_fits(text: str, width: int, commands: tuple[str, ...] = ()) -> None:
    for line in text.splitlines():
        assert len(line) <= width or any(c in line for c in commands), f"too wide at {width}: {line!r}"


def _whole(number: str, text: str) -> bool:
    """`number` appears in `text` as a whole figure, not as part of a longer (or cut) one."""
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d,]|\.\d)", text) is not None


def _section(text: str, title: str) -> list[str]:
    """The lines of a table from its title to the blank line after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _rows(section: list[str]) -> dict[int, list[str]]:
    """Table rows below the rule, by every cuda index their first cell (`0-2,4-7`) names."""
    rule = next(i for i, line in enumerate(section) if line.startswith("─"))
    rows: dict[int, list[str]] = {}
    for line in section[rule + 1:]:
        if not line.strip():
            break
        first, *cells = line.split()
        if not re.fullmatch(r"[\d,-]+", first):
            continue  # a wrapped name's continuation
        for part in first.split(","):
            low, _, high = part.partition("-")
            for index in range(int(low), int(high or low) + 1):
                rows[index] = cells
    return rows


def _gib2(n: int) -> str:
    return f"{gib(n):.2f}"


# ---- fit-length: the GPU table, the answer, what if -----------------------------------------------

FIT_CASES = {
    "8 identical": (X8, ("-tp", "8")),
    "one differs": (MIXED, ("-tp", "8")),
    "two stages": (MIXED, ("-tp", "4", "-pp", "2")),
    "one GPU": (GPUS / "h200-snapshot.json", ()),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", FIT_CASES)
def test_fit_length_gpu_table_keeps_every_figure(cli, width, case):
    snapshot, parallel = FIT_CASES[case]
    args = ("fit-length", FLASH, *parallel, "--gpus", str(snapshot), *WEIGHTS)
    doc = json.loads(_run(cli, 120, *args, "--json").stdout)
    text = _run(cli, width, *args).stdout
    assert "…" not in text
    _assert_fits(text, width, (doc["vllm_command"],))
    rows = _rows(_section(text, "Memory per GPU"))
    assert sorted(rows) == sorted(g["cuda_index"] for g in doc["gpus"])
    for g in doc["gpus"]:
        figures = [_gib2(g[k]) for k in ("cuda_total_bytes", "free_bytes", "requested_bytes", "weights_bytes",
                                         "overhead_bytes", "available_kv_bytes")]
        assert rows[g["cuda_index"]][-6:] == figures, (g["cuda_index"], rows[g["cuda_index"]])
        if doc["pipeline_parallel_size"] > 1:
            assert rows[g["cuda_index"]][-7] == str(g["pp_rank"])
    groups = {tuple(cells) for cells in rows.values()}
    assert len(groups) == {"8 identical": 1, "one differs": 2, "two stages": 3, "one GPU": 1}[case]


@pytest.mark.parametrize("width", WIDTHS)
def test_eight_identical_gpus_are_one_row(cli, width):
    text = _run(cli, width, "fit-length", FLASH, "-tp", "8", "--gpus", str(X8), *WEIGHTS).stdout
    section = "\n".join(_section(text, "Memory per GPU"))
    assert "0-7" in section and "8 × NVIDIA H200" in section and section.count("NVIDIA H200") == 1


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("snapshot", [X8, MIXED])
def test_fit_length_answer_and_what_if_keep_every_figure(cli, width, snapshot):
    args = ("fit-length", FLASH, "-tp", "8", "--gpus", str(snapshot), *WEIGHTS)
    doc = json.loads(_run(cli, 120, *args, "--json").stdout)
    text = _run(cli, width, *args).stdout
    for figure in (format_tokens(doc["model_max_model_len"]), format_tokens(doc["autofit_max_model_len"]),
                   format_tokens(doc["recommended_max_model_len"]), format_gib(doc["margin_bytes"]),
                   format_gib(doc["full_context_kv_memory_bytes"])):
        assert _whole(figure, text), figure
    lines = _section(text, "What if")
    for row in doc["what_if"]:
        line = next(x for x in lines if x.split() and x.split()[0] == format_tokens(row["max_num_batched_tokens"]))
        for figure in (format_tokens(row["max_in_flight_tokens"]), format_tokens(row["autofit_max_model_len"]),
                       format_gib(row["full_context_kv_memory_bytes"])):
            assert _whole(figure, line), (figure, line)


def test_fit_length_below_the_table_reads_row_by_row(cli):
    """At 60 columns no table layout fits: each group of GPUs is a heading and `figure value` pairs."""
    args = ("fit-length", FLASH, "-tp", "8", "--gpus", str(MIXED), *WEIGHTS)
    doc = json.loads(_run(cli, 120, *args, "--json").stdout)
    text = _run(cli, 60, *args).stdout
    assert "…" not in text
    _assert_fits(text, 60, (doc["vllm_command"],))
    section = "\n".join(_section(text, "Memory per GPU"))
    assert "cuda 0-2,4-7  7 × NVIDIA H200" in section and "cuda 3  NVIDIA H200" in section
    assert "free 135.80" in section and "free 139.80" in section and "KV 102.62" in section


# ---- gpus ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("snapshot", [X8, MIXED])
def test_gpus_table_collapses_identical_devices_and_keeps_every_figure(cli, width, snapshot):
    doc = json.loads(_run(cli, 120, "gpus", "--snapshot", str(snapshot), "--json").stdout)
    text = _run(cli, width, "gpus", "--snapshot", str(snapshot)).stdout
    assert "…" not in text
    _assert_fits(text, width)
    rows = _rows(text.splitlines())
    assert sorted(rows) == [d["cuda_index"] for d in doc["devices"]]
    for d in doc["devices"]:
        figures = [_gib2(d[k]) for k in ("total_bytes", "reserved_bytes", "cuda_total_bytes", "used_bytes",
                                         "free_bytes")] + [d["memory_struct"]]
        assert rows[d["cuda_index"]][-6:] == figures
        assert f"cuda:{d['cuda_index']}  {d['uuid']}" in text
    assert len({tuple(cells) for cells in rows.values()}) == (1 if snapshot == X8 else 2)
    if snapshot == X8:
        assert "8 × NVIDIA H200" in text and text.count("sm_90") == 1
    assert _whole("4.00 GiB", text) == (snapshot == MIXED)  # the process holding memory on cuda:3


def test_gpus_renumbered_by_cuda_visible_devices_shows_nvml_indices(tmp_path):
    from dsv4ctl.gpu import load_snapshot
    from dsv4ctl.render.gpus import render_gpus

    doc = json.loads(X8.read_text())
    for device in doc["devices"]:
        device["index"] = 7 - device["cuda_index"]
    path = tmp_path / "renumbered.json"
    path.write_text(json.dumps(doc))
    buffer = io.StringIO()
    render_gpus(load_snapshot(path), Console(file=buffer, width=80, no_color=True))
    header, _, row = buffer.getvalue().splitlines()[2:5]
    assert header.split()[:3] == ["cuda", "nvml", "name"] and row.split()[:2] == ["0-7", "7,6,5,4,3,2,1,0"]


# ---- diagnose: the timeline, the checklist, the starts ---------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("example", ["stale-max-model-len", "deepgemm-ima", "kv-cache-insufficient", "healthy"])
def test_diagnose_tables_keep_every_figure(cli, width, example):
    doc = json.loads(cli("diagnose", "--example", example, "--json").stdout)
    text = cli("diagnose", "--example", example, env={"COLUMNS": str(width)}).stdout
    timeline = "\n".join(_section(text, "Startup timeline"))
    # (asked only where the failure could be the stale-length crash)
    checklist = _section(text, "Stale max_model_len checklist") if doc["checklist"] else []
    _assert_fits(timeline, width)
    _assert_fits("\n".join(checklist), width)
    assert "…" not in timeline and "…" not in "".join(checklist)
    tl = doc["timeline"]
    figures = [format_tokens(tl["max_model_len"]), f"{tl['weights_gib']:.2f} GiB", f"{tl['available_kv_gib']} GiB"]
    if tl["kv_cache_tokens"]:
        figures.append(format_tokens(tl["kv_cache_tokens"]))
    if tl["autofit"]:
        figures += [format_tokens(tl["autofit"]["from"]), format_tokens(tl["autofit"]["to"])]
    for figure in figures:
        assert _whole(figure, timeline), figure
    for number, item in enumerate(doc["checklist"], 1):
        row = next(line for line in checklist if line.split()[:1] == [str(number)])
        if item.get("line"):
            assert _whole(str(item["line"]), row), (item["line"], row)


@pytest.mark.parametrize("width", WIDTHS)
def test_diagnose_starts_table(cli, width, tmp_path):
    logs = REPO / "tests" / "fixtures" / "logs"
    joined = tmp_path / "two-starts.log"
    joined.write_bytes(b"".join((logs / n).read_bytes() for n in ("kv_cache_insufficient_cannot_autofit.log",
                                                                    "autofit_reduced_v032.log")))
    doc = json.loads(cli("diagnose", str(joined), "--json").stdout)
    text = cli("diagnose", str(joined), env={"COLUMNS": str(width)}).stdout
    starts = "\n".join(_section(text, "Starts in this log"))
    _assert_fits(starts, width)
    assert "…" not in starts
    for start in doc["starts"]:
        assert f"{start['first_line']['line']}–{start['last_line']['line']}" in starts


# ---- probe: the case table ------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_probe_case_table(width):
    from dsv4ctl.probe.deepgemm import ProbeCase, ProbeResult
    from dsv4ctl.render.probe import render_probe

    cases = tuple(ProbeCase(b, f, "fault" if f == 0 else "ok", "an illegal memory access was encountered " * (f == 0))
                  for b in (256, 64, 32, 8) for f in (0, 8192))
    buffer = io.StringIO()
    render_probe(ProbeResult("kernel", True, "all-zero context lengths fault", cases),
                 Console(file=buffer, width=width, no_color=True))
    text = buffer.getvalue()
    _assert_fits(text, width)
    rows = [line.split() for line in text.splitlines() if re.match(r"\s*\d+\s+\d+\s", line)]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(c.batch_size, c.fill) for c in cases]


# ---- the helpers ----------------------------------------------------------------------------------


def test_index_ranges():
    assert index_ranges([0, 1, 2, 3, 4, 5, 6, 7]) == "0-7"
    assert index_ranges([0, 1, 2, 4, 5, 6, 7]) == "0-2,4-7"
    assert index_ranges([3]) == "3" and index_ranges([0, 1]) == "0,1" and index_ranges([7, 6]) == "7,6"


def test_pack_moves_a_pair_whole():
    lines = pack([f"figure{i} {i * 1000:,}.25" for i in range(12)], 40, indent="  ")
    assert all(len(line) <= 40 and line.startswith("  ") for line in lines)
    assert "  ".join(line.strip() for line in lines).split("  ") == [f"figure{i} {i * 1000:,}.25" for i in range(12)]


@pytest.mark.parametrize("width", [40, 50, 70, 90])
def test_a_squeezed_table_never_cuts_a_number(width):
    """Wider than the console: the text column wraps, figures stay whole; too narrow: row by row."""
    figures = [f"{n:,}.{n % 100:02d}" for n in (1048576, 980224, 139, 102)]

    def table() -> Table:
        t = Table(title="figures")
        t.add_column("name")
        for i in range(4):
            t.add_column(f"figure {i}", justify="right", no_wrap=True)
        t.add_row("a name of several words, and max_model_len=1048576 in it", *figures)
        return t

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True)
    fitted = fit_table(console, table())
    print_table(console, table())
    text = buffer.getvalue()
    assert "…" not in text and all(len(line) <= width for line in text.splitlines())
    for figure in [*figures, "max_model_len=1048576"]:
        assert _whole(figure, text), figure
    assert fitted == ("┃" in text or "│" in text)


def _tables() -> list[Table]:
    """Tables of every shape the renderers build: boxes or none, padding, edges, headers and footers, fixed,
    bounded and wrapping columns, multi-line and styled cells, an expanding table."""
    from rich import box
    from rich.text import Text

    out = []
    for kw in ({}, {"box": None, "pad_edge": False}, {"box": box.SIMPLE, "show_edge": False}, {"padding": (0, 3)},
               {"show_header": False}, {"show_footer": True}, {"expand": True}, {"collapse_padding": True}):
        t = Table(title="a title wider than the columns are", **kw)
        t.add_column("#", justify="right", no_wrap=True, footer="sum")
        t.add_column("name", overflow="fold", min_width=6, max_width=30)
        t.add_column("fixed", width=9)
        t.add_column("note")
        for i in range(5):
            t.add_row(str(i), Text("[rank0]: a name\nof two lines " * i), "x" * i, f"[bold]styled[/bold] {i * 1048576:,}")
        out.append(t)
    return out


@pytest.mark.parametrize("width", [40, 80, 200])
def test_natural_width_is_richs_own_measure(width):
    from rich.measure import Measurement

    from dsv4ctl.render.tables import natural_width

    console = Console(file=io.StringIO(), width=width)
    for t in _tables():
        assert natural_width(console, t) == Measurement.get(console, console.options.update_width(10_000), t).maximum



def _plain_tables(seed: int) -> list[Table]:
    """Random tables of the plain kind `print_table` lays out as whole rows: no box, one-line cells of str (with
    markup), Text (styled), wide and combining characters, every justification, with and without header and title."""
    import random

    from rich.text import Text

    rng = random.Random(seed)
    words = ["a", "name", "1,048,576", "[bold]marked[/bold]", "0.32.0", "中文字", "e\u0301", "x" * 17, "", "[rank0]:", "🙂"]
    out = []
    for _ in range(40):
        t = Table(title=rng.choice([None, "Starts in this log (38; the report is about the last)", "t"]),
                  title_justify=rng.choice(["left", "center", "right"]), title_style=rng.choice(["", "bold underline"]),
                  header_style=rng.choice(["", "dim", "bold"]), show_header=rng.random() < 0.7, box=None,
                  pad_edge=rng.random() < 0.5)
        for k in range(rng.randint(1, 5)):
            t.add_column(rng.choice(["#", "lines", "vLLM", "verdict", "root cause", "[dim]h[/dim]"]),
                         justify=rng.choice(["left", "right", "center"]), style=rng.choice(["", "dim", "cyan", "bold red"]),
                         no_wrap=rng.random() < 0.5)
        for _ in range(rng.randint(0, 6)):
            t.add_row(*[rng.choice([lambda: rng.choice(words), lambda: Text(rng.choice(words), style=rng.choice(["", "bold"])),
                                    lambda: None])() for _ in t.columns])
        out.append(t)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("color", [False, True])
def test_plain_tables_print_as_rich_prints_them(seed, color):
    """print_table's whole-row layout of a plain table is Rich's own, character for character (styles included
    when they are not only on padding), at every width; a table too wide for it goes Rich's way."""
    from dsv4ctl.render.tables import _as_lines

    for width in (12, 40, 80, 200):
        for t in _plain_tables(seed * 7 + width):
            ours, rich = io.StringIO(), io.StringIO()
            kw = {"width": width, "color_system": "truecolor" if color else None, "force_terminal": color, "legacy_windows": False}
            lines = _as_lines(Console(file=io.StringIO(), **kw), t)
            print_table(Console(file=ours, **kw), t)
            Console(file=rich, **kw).print(t) if lines is not None else print_table(Console(file=rich, **kw), t)
            strip = (lambda s: re.sub(r"\x1b\[[0-9;]*m", "", s)) if color else (lambda s: s)
            assert strip(ours.getvalue()) == strip(rich.getvalue()), (width, ours.getvalue(), rich.getvalue())
            if color and lines is not None:  # every visible character in the same style
                c = Console(file=io.StringIO(), **kw)
                assert _styled_chars(c, lines) == _styled_chars(c, t), width


def _styled_chars(console: Console, renderable) -> list[tuple[str, str]]:
    return [(ch, str(seg.style or "none")) for seg in console.render(renderable) if not seg.control for ch in seg.text
            if not ch.isspace()]


def test_the_starts_table_is_laid_out_as_whole_rows():
    from rich.text import Text

    from dsv4ctl.render.tables import _as_lines

    t = Table(title="Starts", box=None, pad_edge=False, header_style="dim")
    t.add_column("#", justify="right", style="dim", no_wrap=True)
    t.add_column("root cause", overflow="fold")
    for i in range(38):
        t.add_row(Text(str(i + 1)), Text("unrecognized_error"))
    console = Console(file=io.StringIO(), width=80)
    lines = _as_lines(console, t)
    assert lines is not None and len(lines.columns) == 1 and lines.row_count == 39
    assert _as_lines(Console(file=io.StringIO(), width=10), t) is None  # too wide: Rich's own layout, wrapped
