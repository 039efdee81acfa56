"""The files dsv4ctl opens for the operator, in one place: every file it writes, and how a log is told from its
first bytes.

Writing. Every file dsv4ctl writes goes through here: a bundle (`collect -o`), an SVG (`diagnose --svg`), a GPU
snapshot (`gpus --save`), serve's log (`--log-file`), the caches and the calibration records. An `OSError` becomes
one `OutputError` that names the path, says why in words (no such directory, a directory, permission denied, a
read-only file system, no space left) and carries the caller's hint (`choose another -o`). A file is written whole
or not at all (`open_whole`, `write_whole`: a temporary file beside it, renamed over it once complete, removed on
any failure or interrupt); a device or a FIFO (`/dev/stdout`, a named pipe) is written in place. A directory is
made only where the caller asks for it (`make_parents`: its own default places, never a path the operator typed).

Reading. A log may reach dsv4ctl compressed or re-encoded; `decoded(stream, name)` tells it from the first bytes,
whatever the file is called, and gives the log's text as bytes: gzip, xz and bzip2 (the standard library's
`gzip`, `lzma`, `bz2`), a zip archive of one file (`zipfile`), UTF-16 with or without its byte-order mark (a
PowerShell `>` redirect writes UTF-16LE with one) and UTF-32 with one, read as UTF-8. A truncated compressed file
gives what it holds; damaged data is an `InputError`. What cannot be read is an `InputError` that says what the
file is and how to read it: zstd (the `zstandard` package is not one of dsv4ctl's dependencies), lz4, 7-Zip, a
zip of several files, a tar archive, or any other binary file ("a binary file, not a log"). `kind_of(head)` says
which from a file's first bytes without opening anything: the big-file parallel scan (`logs.parallel`) takes a
file whose kind is None (plain text) only.

`files.writing` and `files.reading` hold the two halves; everything is imported from here.
"""

from dsv4ctl.files.reading import READ_HINT, Decoded, cut_short, decoded, kind_of, position_of
from dsv4ctl.files.writing import (
    TEMP_HINT,
    Checked,
    append_line,
    cannot_write,
    check_target,
    open_log,
    open_whole,
    temporary_directory,
    why_not_written,
    write_whole,
)

__all__ = ["READ_HINT", "TEMP_HINT", "Checked", "Decoded", "append_line", "cannot_write", "check_target", "cut_short", "decoded",
           "kind_of", "open_log", "open_whole", "position_of", "temporary_directory", "why_not_written", "write_whole"]
