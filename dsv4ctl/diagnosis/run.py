"""The single pass over the input: lines -> starts -> one `StartAnalyzer` each -> `conclude` per start.

`diagnose(sources)` reads each source once (streaming, bounded memory; a paste read in full, a long log through
the prefilter, a big file in parallel) and `diagnose_lines(lines)` does the same for parsed lines. Both return
the `Diagnosis` of the last start, with every start summarised; what to do about it is `dsv4ctl.advice`'s.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signature_index import LineSorter
from dsv4ctl.diagnosis.analyzer import ANSWER_CAP, HELD_LINES, SERVING_SORTER, StartAnalyzer, request_signature
from dsv4ctl.diagnosis.conclude import conclude_start, not_a_vllm_log
from dsv4ctl.diagnosis.evidence import evidence_of
from dsv4ctl.diagnosis.model import Diagnosis, StartSummary
from dsv4ctl.diagnosis.repeats import Replay, StartPrint, preamble_length
from dsv4ctl.logs import parallel, prefilter
from dsv4ctl.logs.reader import LogLine, Source, close_source, open_source, parse_line, source_list, source_name
from dsv4ctl.logs.starts import StartSplitter

class LogPass:
    """Routes every line to the analyzer of its start.

    With one input, a start that a new one followed is concluded at once and only its summary is kept
    (lines never go back to it), so memory stays bounded on a crash loop of any length; with several
    inputs a further file's lines may belong to an earlier start, so every start stays open. With one input a start
    is also read against the one before it (`repeats.Replay`): one that repeats it line for line takes its
    conclusion without an analyzer, so a crash loop costs its distinct starts."""

    def __init__(self) -> None:
        self.splitter = StartSplitter()
        self.analyzers: dict[int, StartAnalyzer] = {0: StartAnalyzer(0)}
        self.closed: list[StartSummary] = []
        self.sources: set[str] = set()
        self.seq = 0
        self.lines_read = 0
        self.log_lines = 0
        self._held: deque[tuple[str, str, int]] = deque(maxlen=HELD_LINES)
        self.evidence_seen = False
        self.selected = 0  # lines the prefilter selected (analysed or held)
        self.full: set[str] = set()  # sources whose every line was fed (read in full), not only the selected ones
        self._recent: deque[LogLine] = deque(maxlen=8)  # the current start's last lines: a new start's may be among them
        self._print = StartPrint()  # the current start's lines, as the next start is compared with them
        self._before: StartPrint | None = None  # the last start concluded, when the next may repeat it
        self._replay: Replay | None = None  # the current start while it repeats `_before`
        self.replayed = 0  # starts concluded as repeats of the one before

    def feed_batch(
        self, base: int, batch: prefilter.Batch, source: str,
        reread: Callable[[int, prefilter.Gap], Iterable[tuple[int, prefilter.Batch]]] | None = None,
    ) -> None:
        """The lines of a scanned batch (line numbers plus `base`), tagged by `SERVING_SORTER`: while the
        current start serves quietly, a run of lines of kind SKIP is held as a whole (its last HELD_LINES),
        without a step per line, and a `Gap` a scanner left is only counted; otherwise every line goes through
        `feed_raw` with its kind, a gap's lines read again from the file (`reread`)."""
        lines, kinds, marks, gaps = batch
        if kinds is None:
            for lineno, raw in lines:
                self.feed_raw(raw, source, base + lineno)
            return
        at = {gap.pos: gap for gap in gaps or ()}
        i = 0
        for j in [*marks, len(lines)]:
            if i in at:
                gap = at[i]
                a = self.analyzers.get(self.splitter.current)
                if self._quiet(source) and all(a.capped(request_signature(k).id) for k, _ in gap.kinds):
                    # Lines that can change nothing now: counted (the request errors among them by signature).
                    self.selected += gap.count
                    for k, n in gap.kinds:
                        a.count_beyond_cap(request_signature(k).id, n)
                    if gap.kinds:
                        self._held.clear()
                else:
                    if reread is None:
                        raise ValueError("a batch with gaps needs the source to read them again")
                    for base2, again in reread(base, gap):
                        self.feed_batch(base2, again, source)
            if j > i:
                if self._quiet(source):
                    self.selected += j - i
                    self._held.extend((raw, source, base + lineno) for lineno, raw in lines[max(i, j - HELD_LINES):j])
                else:
                    for lineno, raw in lines[i:j]:
                        self.feed_raw(raw, source, base + lineno, kind=LineSorter.SKIP)
            if j < len(lines):
                lineno, raw = lines[j]
                self.feed_raw(raw, source, base + lineno, kind=kinds[j])
            i = j + 1

    def _quiet(self, source: str) -> bool:
        """Whether lines of `source` are held rather than parsed: the current start serves quietly there."""
        a = self.analyzers.get(self.splitter.current)
        if a is not None and a.quiet_serving and source == a.ready_source:
            self._print.held = True  # it held lines unread: a comparison cannot repeat that
            return True
        return False

    def feed_raw(
        self, raw: str, source: str, lineno: int, parsed: LogLine | None = None, kind: int | None = None,
        selected: bool = True,
    ) -> None:
        """A selected line as read. While the current start is serving quietly, lines that can change
        nothing (request-time tracebacks, per-request ERROR lines) are held instead of parsed: only a
        start or shutdown marker, a request-level error of the catalogue, or a sign that the server is
        going down is analysed. At such a sign the last held lines are analysed first (a worker's
        traceback printed just before), and the start is analysed in full from then on. `selected`: whether
        the prefilter selects the line (an input read in full feeds every line)."""
        self.selected += selected
        a = self.analyzers.get(self.splitter.current)
        # Only in the file that showed the start ready: another file of the same launch (the engine's own
        # log after the API server's) still has its startup lines to tell.
        if self._quiet(source):
            if kind is None:
                kind = SERVING_SORTER.sort(raw)
            if kind == LineSorter.SKIP and source in self.full and _ERROR_SHAPED.search(raw):
                # A paste read in full: its every error is read (a request's traceback is what it was pasted for).
                kind = LineSorter.ALERT
            if kind == LineSorter.ALERT:
                a.alert = True
                held, self._held = self._held, deque(maxlen=HELD_LINES)
                for item in held:
                    self.feed(parse_line(*item))
            elif kind == LineSorter.SKIP:
                # (The first answers with a client's error are read: the finding that quotes one.)
                if not (len(a.client_answers) < ANSWER_CAP and '" 4' in raw and "HTTP/" in raw):
                    self._held.append((raw, source, lineno))
                    return
            elif a.count_beyond_cap(request_signature(kind).id):
                # One more request answered with an error the start already holds HIT_CAP examples of:
                # counted, not parsed (it can change no verdict, and its first lines are the evidence).
                self._held.clear()
                return
        # Held lines are those since the last analysed one, so a replay never goes back in time.
        self._held.clear()
        self.feed(parsed if parsed is not None else parse_line(raw, source, lineno))

    def feed(self, line: LogLine) -> None:
        self.seq += 1
        self.sources.add(line.source)
        one = len(self.sources) == 1
        current = self.analyzers.get(self.splitter.current)
        index, opened = self.splitter.route(line, current.settled if current is not None else True)
        if opened:
            # The lines just before the marker that are the new launch's (the logo's record, the platform line).
            run = preamble_length(self._recent, line)
            first = self._recent[-run] if run else None
            last = self._recent[-run - 1] if len(self._recent) > run else None
            if self._replay is not None:
                self._end_replay(last)
            elif one and current is not None:
                if run and last is not None:
                    current.last = last
                self._close(current)
            self._recent.clear()
            self._print = StartPrint()
            if one and self._before is not None and self._before.usable:
                self._replay = Replay(index, self._before, first)
            else:
                self.analyzers[index] = StartAnalyzer(index)
                self.analyzers[index].first = first
        self._recent.append(line)
        if self._replay is not None:
            if self._replay.take(line, self.seq):
                return
            self._materialize()
        self.analyzers[index].feed(line, self.seq)
        self._print.add(line)

    def _materialize(self) -> None:
        """The start being replayed differs from the one before it: an analyzer reads it from its first line."""
        replay, self._replay = self._replay, None
        a = self.analyzers[replay.index] = StartAnalyzer(replay.index)
        a.first = replay.first
        for line, seq in replay.lines:
            a.feed(line, seq)
            self._print.add(line)

    def _end_replay(self, last: LogLine | None) -> None:
        """A new start opened while the current one was replayed: a repeat of the one before takes its conclusion,
        with its own first and last line; anything else is analysed and concluded."""
        replay = self._replay
        if not replay.complete:
            self._materialize()
            a = self.analyzers[replay.index]
            if last is not None:
                a.last = last
            self._close(a)
            return
        self._replay = None
        before = replay.before
        first = replay.first or replay.lines[0][0]
        end = last if last is not None else replay.lines[-1][0]
        self.closed.append(replace(before.summary, first=evidence_of(first), last=evidence_of(end)))
        self.log_lines += before.log_lines
        self.evidence_seen = self.evidence_seen or before.evidence_seen
        self.replayed += 1

    def _close(self, a: StartAnalyzer) -> None:
        del self.analyzers[a.index]
        a.finish()
        a.full_read = self.read_in_full()
        self.log_lines += a.log_lines
        self.evidence_seen = self.evidence_seen or a.evidence_seen
        self._before = None
        if a.first is not None:
            a.light = True
            summary = summary_of(a, conclude_start(a, sorted(self.sources)))
            self.closed.append(summary)
            if self._print.usable:
                self._print.summary, self._print.log_lines, self._print.evidence_seen = summary, a.log_lines, a.evidence_seen
                self._before = self._print

    def read_in_full(self) -> bool:
        """Whether every source was fed line by line in full (then a line after another is all that came after)."""
        return bool(self.sources) and self.sources <= self.full

    def conclude(self, sources: list[str]) -> "Diagnosis":
        # Lines held since the last one analysed end the log: the last of them is read, as the start's last line.
        if self._held:
            self.feed(parse_line(*self._held[-1]))
            self._held.clear()
        if self._replay is not None:
            self._materialize()  # the report is about the last start: read in full
        open_starts = sorted(self.analyzers.values(), key=lambda a: a.index)
        for a in open_starts:
            a.finish()
            a.full_read = self.read_in_full()
        lines_read = self.lines_read
        if not self.log_lines and not any(a.log_lines or a.evidence_seen for a in open_starts) and not self.evidence_seen:
            foreign = not_a_vllm_log(sources, lines_read, self.seq)
            foreign.lines_selected = self.selected
            return foreign
        starts = [a for a in open_starts if a.first is not None] or open_starts[:1]
        for a in starts[:-1]:
            a.light = True
        results = [conclude_start(a, sources) for a in starts]
        last = results[-1]
        summaries = self.closed + [summary_of(a, d) for a, d in zip(starts, results)]
        last.starts = [replace(st, index=i) for i, st in enumerate(summaries)]
        last.lines_examined = self.seq
        last.lines_selected = self.selected
        last.lines_read = lines_read
        return last

def summary_of(a: StartAnalyzer, d: "Diagnosis") -> StartSummary:
    return StartSummary(
        index=a.index,
        first=evidence_of(a.first) if a.first else None,
        last=evidence_of(a.last) if a.last else None,
        verdict=d.verdict,
        phase=d.phase,
        root_cause=d.root_cause.id if d.root_cause else None,
        vllm_version=d.timeline.vllm_version,
    )

def diagnose(
    sources: Iterable[Source] | Source,
    *,
    engine: str = "auto",
    workers: int | None = None,
    parallel_min_bytes: int | None = None,
    progress: Callable[[int], None] | None = None,
    idle: Callable[[], None] | None = None,
) -> Diagnosis:
    """Diagnose one or more logs (paths, "-" for stdin, .gz, binary streams), reading each once.

    `progress`, when given, is called with the bytes of all the sources read so far (a .gz: compressed
    bytes), at most every few MiB.

    A regular, uncompressed file of at least `parallel_min_bytes` is scanned by `workers` processes
    (default: the usable CPUs, at most 4; `dsv4ctl.logs.parallel`); the result is the same.
    `parallel_min_bytes` defaults to `parallel.PARALLEL_MIN_BYTES` (64 MiB). `idle`, when given, is called
    once while scanning children read a big log (`parallel.scan_file_batches`).
    """
    if parallel_min_bytes is None:
        parallel_min_bytes = parallel.PARALLEL_MIN_BYTES
    items = source_list(sources)
    names = [source_name(s) for s in items]
    run = LogPass()
    n_workers = parallel.default_workers() if workers is None else max(1, workers)
    bytes_read = prefilter.SourceOffsets(progress)
    for source, name in zip(items, names):
        report = bytes_read.next_source()
        if n_workers > 1 and isinstance(source, (str, Path)) and parallel.parallel_size(source, parallel_min_bytes):
            count: list[int] = []
            for base, batch in parallel.scan_file_batches(
                source, engine=engine, workers=n_workers, progress=report, line_count=count, tagger=SERVING_SORTER,
                hold=HELD_LINES, idle=idle,
            ):
                run.feed_batch(base, batch, name, reread=parallel.rereader(source, engine, SERVING_SORTER))
            run.lines_read += count[0] if count else 0
            continue
        stream = open_source(source)
        count: list[int] = []
        try:
            head = _read_up_to(stream, FULL_READ_BYTES + 1)
            if len(head) <= FULL_READ_BYTES:
                # A paste, or a log this short: every line is read (the prefilter only says which it selects).
                run.full.add(name)
                for lineno, raw in prefilter.split_lines(head):
                    run.feed_raw(raw, name, lineno, selected=prefilter.line_matches(raw))
                    count = [lineno]
                if report is not None:
                    report(len(head))
            else:
                for batch in prefilter.scan_batches(
                    prefilter.Rejoined(head, stream), engine=engine, line_count=count, progress=report,
                    tagger=SERVING_SORTER,
                ):
                    run.feed_batch(0, batch, name)
        finally:
            close_source(source, stream)
        run.lines_read += count[0] if count else 0
    return run.conclude(names)

def prestart(path: str) -> bool:
    """Begin now the parallel scan that `diagnose([path])` makes of a big regular file (`parallel.prestart`, with
    diagnose's own settings), so that its children scan while this process still starts: the process entry calls
    it before the CLI's imports. True when it began; `diagnose` adopts it (a scan with other settings starts its
    own)."""
    return parallel.prestart(path, tagger=SERVING_SORTER, hold=HELD_LINES)

# An error's first line as a log shows it: an ERROR record, a traceback's header, an exception's line, a C++
# component's E/F record (glog's "E1103 10:20:41.123", Ray's "[2026-11-30 11:40:01,004 E 812 840]").
_ERROR_SHAPED = re_cache.compile(r"(?:^|[\s\]|])ERROR\b|Traceback \(most recent call last\)|"
                                 r"(?:^|\) )(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): |"
                                 r"(?:^|\s|\])[EF][0-9]{4} [0-9:.]+ |,[0-9]{3} [EF] [0-9]+ [0-9]+\]")

# An input this small (a paste, a short log) is read line by line in full: its lines without a prefilter
# keyword count too (a server's access lines, which show it answered requests around an error).
FULL_READ_BYTES = 1 << 20

def _read_up_to(stream, n: int) -> bytes:
    """Up to `n` bytes of a stream (fewer only at its end); a truncated .gz gives what it had."""
    parts: list[bytes] = []
    size = 0
    reader = prefilter.reader_of(stream)
    while size < n:
        block = reader.read(n - size)
        if not block:
            break
        parts.append(block)
        size += len(block)
    return b"".join(parts)

def diagnose_lines(lines: Iterable[LogLine]) -> Diagnosis:
    """Diagnose lines a caller already parsed (e.g. `iter_log_lines`); same result as `diagnose`: a source of
    at most `FULL_READ_BYTES` is read in full, a longer one through the prefilter."""
    sources: list[str] = []
    run = LogPass()
    read = 0
    held: list[LogLine] = []  # the lines of the current source while it may still be small
    size = 0
    full = True

    def flush(small: bool) -> None:
        if small and held:
            run.full.add(held[0].source)
        for ln in held:
            if small:
                run.feed_raw(ln.raw, ln.source, ln.lineno, ln, selected=prefilter.line_matches(ln.raw))
            elif prefilter.line_matches(ln.raw):
                run.feed_raw(ln.raw, ln.source, ln.lineno, ln)
        held.clear()

    for line in lines:
        read += 1
        if line.source not in sources:
            flush(full)
            sources.append(line.source)
            size, full = 0, True
        if full:
            held.append(line)
            size += len(line.raw.encode("utf-8", "replace")) + 1
            if size > FULL_READ_BYTES:
                full = False
                flush(False)
        elif prefilter.line_matches(line.raw):
            run.feed_raw(line.raw, line.source, line.lineno, line)
    flush(full)
    run.lines_read = read
    return run.conclude(sources)
