"""The message index's packed file (message_index.bin): its layout, `pack` (for the generator) and `unpack` (for the
loader), one definition for both.

Layout, little-endian: a header struct (magic, schema, rows per block, entries, then the byte lengths of the
sections), then the sections: the JSON header (zlib), the anchor words ("\n"-joined, zlib; the first is "", the
bucket of the entries without an anchor), the buckets as two uint32 arrays (word k finds ids[starts[k]:starts[k+1]]),
the blocks' offsets (uint32), and the body: the entries' JSON rows in zlib blocks of `BLOCK_ROWS`. Standard
library only.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from typing import Any

SCHEMA = 1
MAGIC = b"DSV4MIX\x01"
BLOCK_ROWS = 16  # entries per zlib block: a lookup's candidates cost ~0.1 ms a block
# magic, schema, rows per block, entries, then the byte lengths of: header, words, starts, ids, offsets
_HEAD = struct.Struct("<8sIIIIIIII")


def _array(view: memoryview) -> array:
    a = array("I")
    a.frombytes(view)
    if sys.byteorder == "big":
        a.byteswap()  # written little-endian
    return a


def _le(values: list[int]) -> bytes:
    a = array("I", values)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def pack(data: dict[str, Any]) -> bytes:
    """The packed file for the index `data` (the JSON source's document: its header keys, `fields`, `entries`).

    Byte-identical for the same data. The buckets are the entries' `anchor` words (space-separated; an entry
    without one goes to the bucket of the empty word, checked on every lookup); the rows keep their order."""
    rows = data["entries"]
    fields = list(data["fields"])
    a = fields.index("anchor")
    head = {k: v for k, v in data.items() if k != "entries"}
    if head.get("schema") != SCHEMA:
        raise ValueError(f"schema {head.get('schema')!r}, expected {SCHEMA}")
    buckets: dict[str, list[int]] = {"": []}
    for i, row in enumerate(rows):
        words = row[a].split()
        for w in words:
            buckets.setdefault(w, []).append(i)
        if not words:
            buckets[""].append(i)
    words = sorted(buckets)
    starts, ids = [0], []
    for w in words:
        ids += buckets[w]
        starts.append(len(ids))
    blocks = [zlib.compress(json.dumps(rows[i:i + BLOCK_ROWS], ensure_ascii=False, separators=(",", ":")).encode(), 9)
              for i in range(0, len(rows), BLOCK_ROWS)]
    offsets = [0]
    for blk in blocks:
        offsets.append(offsets[-1] + len(blk))
    sections = [zlib.compress(json.dumps(head, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(), 9),
                zlib.compress("\n".join(words).encode(), 9), _le(starts), _le(ids), _le(offsets)]
    return (_HEAD.pack(MAGIC, SCHEMA, BLOCK_ROWS, len(rows), *(len(x) for x in sections))
            + b"".join(sections) + b"".join(blocks))


def unpack(blob: bytes) -> tuple[int, int, dict[str, Any], list[str], array, array, array, memoryview]:
    """(rows per block, entries, header, words, starts, ids, offsets, body) of a packed file; ValueError when it is
    not one, of another schema, or cut short."""
    if len(blob) < _HEAD.size or blob[:8] != MAGIC:
        raise ValueError("not a packed message index (scripts/build_message_index.py writes one)")
    _magic, schema, block_rows, count, *lengths = _HEAD.unpack_from(blob)
    if schema != SCHEMA:
        raise ValueError(f"schema {schema!r}, expected {SCHEMA}")
    view = memoryview(blob)
    parts, at = [], _HEAD.size
    for n in lengths:
        parts.append(view[at:at + n])
        at += n
    body = view[at:]
    head, words, starts, ids, offsets = parts
    header: dict[str, Any] = json.loads(zlib.decompress(head))
    word_list = zlib.decompress(words).decode("utf-8").split("\n")
    starts_a, ids_a, offsets_a = _array(starts), _array(ids), _array(offsets)
    if (len(offsets_a) != -(-count // block_rows) + 1 or len(starts_a) != len(word_list) + 1
            or offsets_a[-1] != len(body) or starts_a[-1] != len(ids_a)):
        raise ValueError("packed message index: inconsistent lengths")
    return block_rows, count, header, word_list, starts_a, ids_a, offsets_a, body
