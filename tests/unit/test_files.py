"""`dsv4ctl.files`: every file dsv4ctl writes (whole or not at all, an OSError one error naming the path), and a
log told from its first bytes (compressed and re-encoded logs read as their text, binary files refused). The
compressed files are made here with the standard library's own compressors."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl import files
from dsv4ctl.errors import InputError, OutputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
LOG = (FIXTURES.parent.parent.parent / "dsv4ctl" / "examples" / "kv-cache-insufficient.log").read_bytes()
HINT = "choose another -o"


# -- writing -------------------------------------------------------------------------------------------------


def _unwritable(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Paths that cannot be written, and the words that say why."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {
        "a directory": (tmp_path, "it is a directory"),
        "no such directory": (tmp_path / "missing" / "out.bin", f"no such directory: {tmp_path / 'missing'}"),
        "a path under a file": (a_file / "out.bin", f"{a_file} is a file, not a directory"),
        "/proc": (Path("/proc/dsv4ctl-test.bin"), "cannot write /proc/dsv4ctl-test.bin: "),
        "a full disk": (Path("/dev/full"), "no space left on the device"),
    }


@pytest.mark.parametrize("case", ["a directory", "no such directory", "a path under a file", "/proc", "a full disk"])
def test_a_file_that_cannot_be_written_is_one_output_error(tmp_path, case):
    path, why = _unwritable(tmp_path)[case]
    with pytest.raises(OutputError) as raised:
        files.write_whole(path, b"data" * 1000, hint=HINT)
    assert raised.value.message.startswith(f"cannot write {path}: ") and why in raised.value.message
    assert raised.value.hint == HINT and int(raised.value.exit_code) == 1
    assert not (tmp_path / "missing").exists()  # no directory made for a path the operator typed
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_read_only_directory_is_permission_denied(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(OutputError, match="permission denied"):
            files.write_whole(locked / "x", b"1", hint=HINT)
    finally:
        locked.chmod(stat.S_IRWXU)


def test_written_whole_or_not_at_all(tmp_path):
    out = tmp_path / "b.bin"
    out.write_bytes(b"old")
    out.chmod(0o640)
    with pytest.raises(KeyboardInterrupt):
        with files.open_whole(out, hint=HINT) as f:
            f.write(b"half of the new")
            raise KeyboardInterrupt
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["b.bin"]
    files.write_whole(out, b"new", hint=HINT)
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o640  # its mode kept
    assert os.listdir(tmp_path) == ["b.bin"]


def test_a_link_stays_a_link_and_a_device_is_written_in_place(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    files.write_whole(link, b"[1]", hint=HINT)
    assert link.is_symlink() and target.read_bytes() == b"[1]"
    assert files.check_target("/dev/null", hint=HINT) is True
    files.write_whole("/dev/null", b"anything", hint=HINT)  # not replaced by a regular file
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_make_parents_only_when_asked(tmp_path):
    files.write_whole(tmp_path / "a" / "b" / "c.bin", b"1", hint=None, make_parents=True)
    assert (tmp_path / "a" / "b" / "c.bin").read_bytes() == b"1"
    files.append_line(tmp_path / "d" / "e.jsonl", b'{"x": 1}\n', hint=None, make_parents=True)
    files.append_line(tmp_path / "d" / "e.jsonl", b'{"x": 2}\n', hint=None)
    assert (tmp_path / "d" / "e.jsonl").read_bytes() == b'{"x": 1}\n{"x": 2}\n'
    with pytest.raises(OutputError, match="no space left"):
        files.append_line("/dev/full", b"x\n", hint=None)


def test_the_log_serve_writes_refuses_as_the_others(tmp_path):
    with pytest.raises(OutputError, match="no such directory"):
        files.open_log(tmp_path / "none" / "serve.log", append=False, hint=HINT)
    log = files.open_log(tmp_path / "logs" / "serve.log", append=False, hint=HINT, make_parents=True)
    log.write(b"line\n")
    log.close()
    assert (tmp_path / "logs" / "serve.log").read_bytes() == b"line\n"


def test_a_cache_that_cannot_be_written_is_only_slower(tmp_path):
    from dsv4ctl.cache_dir import write_file

    blocker = tmp_path / "file"
    blocker.write_text("")
    assert write_file(blocker / "cache" / "x.bin", b"1") is False
    assert write_file(Path("/dev/full"), b"1") is False
    assert write_file(tmp_path / "new" / "x.bin", b"1") is True and (tmp_path / "new" / "x.bin").read_bytes() == b"1"


# -- reading -------------------------------------------------------------------------------------------------


def _zip(data: bytes, name: str = "vllm.log") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return buf.getvalue()


PACKERS = {
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "bzip2": bz2.compress,
    "zip": _zip,
    "utf-16": lambda b: b.decode("utf-8").encode("utf-16"),  # with its BOM, as PowerShell's `>` writes it
    "utf-16-le": lambda b: b.decode("utf-8").encode("utf-16-le"),  # no BOM
    "utf-32": lambda b: b.decode("utf-8").encode("utf-32"),
    "gzip of utf-16": lambda b: gzip.compress(b.decode("utf-8").encode("utf-16")),
}


def _read(data: bytes, name: str = "x.log") -> bytes:
    stream = files.decoded(io.BufferedReader(io.BytesIO(data)), name)  # type: ignore[arg-type]
    try:
        return stream.read()
    finally:
        stream.close()


@pytest.mark.parametrize("kind", sorted(PACKERS))
def test_a_compressed_or_reencoded_log_reads_as_its_text(kind):
    packed = PACKERS[kind](LOG)
    assert files.kind_of(packed) == kind.split(" of ")[0]
    assert _read(packed) == LOG


ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=3000)
# Text as logs are: at least every other character ASCII (so that UTF-16 is told from its zero high bytes), the
# others anywhere in the Basic Multilingual Plane.
_ASCII = st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=1, max_size=40)
_OTHER = st.text(st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=1)
LOG_TEXT = st.lists(st.tuples(_ASCII, _OTHER), min_size=4, max_size=80).map(lambda parts: "".join(a + b for a, b in parts))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ANY_TEXT, kind=st.sampled_from(["gzip", "xz", "bzip2", "zip"]))
def test_any_text_comes_back_whole_from_a_compressed_file(text, kind):
    data = text.encode("utf-8")
    assert _read(PACKERS[kind](data)) == data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=LOG_TEXT, kind=st.sampled_from(["utf-16", "utf-32", "gzip of utf-16"]))
def test_log_text_comes_back_whole_from_utf16_and_utf32(text, kind):
    data = text.encode("utf-8")
    assert _read(PACKERS[kind](data)) == data


@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=8, max_size=2000))
def test_ascii_text_comes_back_whole_from_utf16_without_its_mark(text):
    data = text.encode("utf-8")
    assert _read(PACKERS["utf-16-le"](data)) == data
    assert _read(data.decode().encode("utf-16-be")) == data


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_a_compressed_log_cut_short_gives_what_it_holds(kind):
    whole = LOG * 100  # 600 KB: bzip2 -1 gives what its 100 kB blocks hold, the others as they go
    packed = bz2.compress(whole, 1) if kind == "bzip2" else PACKERS[kind](whole)
    got = _read(packed[: len(packed) * 2 // 3])
    assert got and whole.startswith(got) and len(got) < len(whole)


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_damaged_data_is_an_input_error(kind):
    packed = bytearray(PACKERS[kind](LOG * 20))
    packed[40:60] = b"\x00" * 20 if kind != "bzip2" else b"\xff" * 20
    with pytest.raises(InputError, match=f"cannot read x.log: it starts like {kind}"):
        _read(bytes(packed))


def _tar(data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("vllm.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("data, words", [
    (bytes.fromhex("28b52ffd") + b"\x00" * 32, "x.log is zstd-compressed: run zstd -d x.log"),
    (bytes.fromhex("04224d18") + b"\x00" * 32, "x.log is lz4-compressed: run lz4 -d x.log"),
    (bytes.fromhex("377abcaf271c") + b"\x00" * 32, "x.log is a 7-Zip archive, not a log"),
    (_tar(LOG), "x.log is a tar archive, not a log"),
    (Path("/bin/sh").read_bytes()[:4096], "x.log is a binary file, not a log"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 64, "x.log is a binary file, not a log"),
])
def test_what_cannot_be_read_says_what_it_is(data, words):
    with pytest.raises(InputError) as raised:
        _read(data)
    assert raised.value.message == words and int(raised.value.exit_code) == 1


def test_a_zip_of_several_files_names_them():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("api.log", "a")
        z.writestr("engine.log", "b")
    with pytest.raises(InputError, match=r"x.log is a zip archive of 2 files: api.log, engine.log"):
        _read(buf.getvalue())


def test_text_stays_text():
    # A log truncated in place by logrotate's copytruncate starts with a run of NULs, one a crash cut short ends
    # with one, and a restart may write on after it: still a log.
    assert files.kind_of(b"\x00" * 4096 + LOG) is None
    assert files.kind_of(LOG[:3000] + b"\x00" * 4096) is None
    assert files.kind_of(LOG[:3000] + b"\x00" * 4096 + LOG) is None
    assert files.kind_of(LOG[:3000] + b"\x00" + LOG) == "binary"  # a NUL among its bytes
    # Latin-1 or broken UTF-8 after bytes that look like a UTF-16 mark: not UTF-16.
    assert files.kind_of(b"\xff\xfe ERROR \xe2\x82 bad\n" * 10) is None
    assert files.kind_of(LOG) is None and files.kind_of(b"") is None
    stream = io.BufferedReader(io.BytesIO(LOG))
    assert files.decoded(stream, "x.log") is stream  # a plain log is read as it is, untouched  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["plain", "gzip", "xz", "bzip2", "zip", "utf-16", "binary"])
def test_the_parallel_scan_takes_plain_text_only(tmp_path, kind):
    from dsv4ctl.logs import parallel

    head = {"plain": LOG, "binary": b"\x7fELF\x02\x01\x01\x00" + LOG}.get(kind) or PACKERS[kind](LOG)
    big = tmp_path / "big.log"
    with open(big, "wb") as f:
        f.write(head)
        f.truncate(parallel.PARALLEL_MIN_BYTES + 1)  # the size of a big log, sparse: only its head is read here
    expected = parallel.PARALLEL_MIN_BYTES + 1 if kind == "plain" else None
    assert parallel.parallel_size(big) == expected


def test_a_compressed_log_cut_short_is_read_and_said_to_be_cut(cli, tmp_path):
    import gzip as _gzip
    import lzma

    from dsv4ctl.files import reading

    text = "".join(f"INFO 12-04 10:00:{i % 60:02d} [loader.py:1] Loading weights took {i} seconds\n" for i in range(2000)).encode()
    for name, packed in (("cut.log.gz", _gzip.compress(text)), ("cut.log.xz", lzma.compress(text))):
        path = tmp_path / name
        path.write_bytes(packed[: len(packed) // 2])
        reading._CUT_SHORT.clear()
        result = cli("diagnose", path)
        assert f"{path} is cut short" in result.stderr and "Traceback" not in result.output
        whole = tmp_path / ("whole-" + name)
        whole.write_bytes(packed)
        reading._CUT_SHORT.clear()
        assert "cut short" not in cli("diagnose", whole).stderr
