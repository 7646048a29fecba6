"""Compression codecs for the records section of a RecordBatch v2 (attribute bits 0-2).

Each codec writes the byte stream Apache Kafka's Java client writes, so Kafka, kafka-python
and Tributary read each other's batches:

| id | codec  | stream Kafka writes                                   | package         |
|----|--------|-------------------------------------------------------|-----------------|
| 0  | none   | the records as they are                               | —               |
| 1  | gzip   | one gzip member (`GZIPOutputStream`), level 6         | stdlib `zlib`   |
| 2  | snappy | xerial framing (`SnappyOutputStream`), 32 KiB blocks  | `python-snappy` |
| 3  | lz4    | LZ4 frame, independent 64 KiB blocks, no checksums    | `lz4`           |
| 4  | zstd   | zstd frame(s) (`ZstdOutputStream`), level 3           | `zstandard`     |

Xerial snappy framing: an 8-byte magic `\\x82SNAPPY\\x00`, version i32 and compatible-version
i32 (both 1, big-endian), then blocks of (compressed length i32, raw snappy block), each block
compressing at most 32 KiB of input. Decoding also accepts plain raw snappy, which some
clients send, and ignores the two version fields, which some writers encode little-endian.

Ids 5-7 are unassigned: they and codecs whose package is missing raise
`UnsupportedCompressionTypeError`. Bytes a codec cannot decode raise `CorruptRecordError`.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

from storage.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError

try:
    import snappy
except ImportError:  # pragma: no cover - exercised only where the package is absent
    snappy = None

try:
    import lz4.frame as lz4_frame
except ImportError:  # pragma: no cover
    lz4_frame = None

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None


class Compression(IntEnum):
    """Codec id stored in attribute bits 0-2 of a RecordBatch v2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's defaults: gzip uses Deflater.DEFAULT_COMPRESSION (6), zstd level 3 (KIP-390).
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
# snappy-java's SnappyOutputStream default block size, which Kafka does not override.
XERIAL_BLOCK_SIZE = 32 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# Windows 31 / 47 make zlib write / read the gzip container instead of a zlib one.
_GZIP_WBITS = 31
_GZIP_OR_ZLIB_WBITS = 47
_BLOCK_LENGTH = struct.Struct(">i")
_ZSTD_STEP = 128  # compressed bytes per decompress call under a limit (`_zstd_decode`)
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50  # the low four bits vary
_ZSTD_BLOCK_MAX = 128 * 1024

_PACKAGES = {
    Compression.SNAPPY: ("snappy", "python-snappy"),
    Compression.LZ4: ("lz4", "lz4"),
    Compression.ZSTD: ("zstandard", "zstandard"),
}


def codec_of(compression_id: int) -> Compression:
    """The `Compression` for attribute bits 0-2; ids 5-7 raise UnsupportedCompressionTypeError."""
    try:
        return Compression(compression_id)
    except ValueError:
        raise UnsupportedCompressionTypeError(
            f"compression id {compression_id} is not a Kafka codec (known: 0 none, 1 gzip, "
            "2 snappy, 3 lz4, 4 zstd); the producer must use one of these"
        ) from None


def _require(codec: Compression) -> None:
    modules = {Compression.SNAPPY: snappy, Compression.LZ4: lz4_frame, Compression.ZSTD: zstandard}
    if modules[codec] is None:
        module_name, package = _PACKAGES[codec]
        raise UnsupportedCompressionTypeError(
            f"{codec.name.lower()} compression needs the Python module {module_name!r}, which is "
            f"not installed; run `pip install {package}` or use another codec"
        )


def compress(codec: Compression, data: bytes | memoryview) -> bytes:
    """Compress `data` (a batch's records section) into the stream Kafka writes for `codec`."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return zlib.compress(data, GZIP_LEVEL, wbits=_GZIP_WBITS)
    if codec == Compression.SNAPPY:
        _require(codec)
        return _xerial_encode(data)
    if codec == Compression.LZ4:
        _require(codec)
        # Kafka's KafkaLZ4BlockOutputStream: independent 64 KiB blocks, no content size, no
        # block or content checksum. Its reader rejects dependent (linked) blocks.
        return lz4_frame.compress(
            data,
            block_size=lz4_frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
    if codec == Compression.ZSTD:
        _require(codec)
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    raise UnsupportedCompressionTypeError(f"compression {codec!r} has no encoder")


def decompress(codec: Compression, data: bytes | memoryview, max_size: int | None = None) -> bytes:
    """Decompress a records section written by any Kafka client with `codec`; past `max_size` bytes
    of output (None: no limit) stop and raise InvalidRecordError, having held little more than
    `max_size` bytes (a small batch may expand a thousandfold: a decompression bomb)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec != Compression.GZIP:
        _require(codec)
    limit = -1 if max_size is None else max_size
    try:
        if codec == Compression.GZIP:
            return _gzip_decode(data, limit)
        if codec == Compression.SNAPPY:
            return _snappy_decode(bytes(data), limit)
        if codec == Compression.LZ4:
            return _lz4_decode(data, limit)
        return _zstd_decode(data, limit)
    except (CorruptRecordError, InvalidRecordError):
        raise
    except Exception as error:  # each codec library has its own exception types
        raise CorruptRecordError(
            f"{codec.name.lower()} records section of {len(data)} bytes does not decompress "
            f"({type(error).__name__}: {error}); the batch is damaged, resend it"
        ) from error


def _check_size(codec: str, size: int, limit: int) -> None:
    if 0 <= limit < size:
        raise InvalidRecordError(
            f"the {codec} records section decompresses to more than {limit} bytes, over "
            "max.decompressed.batch.bytes; send smaller batches or raise max.decompressed.batch.bytes on the topic"
        )


def _gzip_decode(data: bytes | memoryview, limit: int) -> bytes:
    """Decode one or more concatenated gzip members, as Java's GZIPInputStream does."""
    pieces = []
    size = 0
    remaining = bytes(data)
    while remaining:
        decoder = zlib.decompressobj(_GZIP_OR_ZLIB_WBITS)
        piece = decoder.decompress(remaining, 0 if limit < 0 else limit - size + 1)
        size += len(piece)
        _check_size("gzip", size, limit)
        pieces.append(piece)
        if not decoder.eof:
            raise CorruptRecordError(
                f"gzip records section ends inside a member after {len(data)} bytes; the batch is truncated, resend it"
            )
        remaining = decoder.unused_data
    return b"".join(pieces)


def _lz4_decode(data: bytes | memoryview, limit: int) -> bytes:
    """Decode the one LZ4 frame Kafka writes (bytes after its end are ignored, as before)."""
    decoder = lz4_frame.LZ4FrameDecompressor()
    output = decoder.decompress(bytes(data), max_length=-1 if limit < 0 else limit + 1)
    _check_size("lz4", len(output), limit)
    if not decoder.eof:
        raise CorruptRecordError(
            f"lz4 records section of {len(data)} bytes ends inside its frame; the batch is truncated, resend it"
        )
    return output


def _xerial_encode(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    pieces = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = snappy.compress(bytes(view[start : start + XERIAL_BLOCK_SIZE]))
        pieces.append(_BLOCK_LENGTH.pack(len(block)))
        pieces.append(block)
    return b"".join(pieces)


def _snappy_decode(data: bytes, limit: int) -> bytes:
    """Decode xerial-framed snappy (what Kafka writes) or a raw snappy block."""
    if not data.startswith(XERIAL_MAGIC):
        _check_size("snappy", _snappy_length(data), limit)
        return snappy.decompress(data)
    pieces = []
    size = 0
    position = len(XERIAL_HEADER)
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError(
                f"xerial snappy stream of {len(data)} bytes ends inside a block length at "
                f"{position}; the batch is truncated, resend it"
            )
        (block_length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if block_length < 0 or position + block_length > len(data):
            raise CorruptRecordError(
                f"xerial snappy block at {position - 4} claims {block_length} bytes but "
                f"{len(data) - position} remain; the batch is damaged, resend it"
            )
        block = data[position : position + block_length]
        size += _snappy_length(block)
        _check_size("snappy", size, limit)
        pieces.append(snappy.decompress(block))
        position += block_length
    return b"".join(pieces)


def _snappy_length(block: bytes) -> int:
    """The length a raw snappy block declares for its output (its leading unsigned varint), read
    before decompressing it; snappy refuses a block whose output differs."""
    length = shift = 0
    for position, byte in enumerate(block[:5]):
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
        if position == 4:
            break
    raise CorruptRecordError("a snappy block does not start with its length; the batch is damaged, resend it")


def _zstd_decode(data: bytes | memoryview, limit: int) -> bytes:
    """Decode one or more zstd frames, with or without a content size in their headers.

    zstd-jni's streaming writer omits the content size, so one-shot decompression cannot size its
    output; a decompression object per frame can. Its output has no bound, so under a limit the
    input goes in whole only when its block headers bound the output within the limit
    (`_zstd_output_bound`); otherwise `_ZSTD_STEP` bytes at a time: a step yields at most 128 KiB
    per 4 bytes (a run-length block), so the output checked after each step is never more than
    4 MiB past the limit."""
    pieces = []
    size = 0
    remaining = bytes(data)
    step = len(remaining) if limit < 0 or _zstd_output_bound(remaining, limit) <= limit else _ZSTD_STEP
    while remaining:
        decoder = zstandard.ZstdDecompressor().decompressobj()
        position = 0
        while not decoder.eof and position < len(remaining):
            piece = decoder.decompress(remaining[position : position + step])
            position += step
            size += len(piece)
            _check_size("zstd", size, limit)
            pieces.append(piece)
        if not decoder.eof:
            raise CorruptRecordError(
                f"zstd records section of {len(data)} bytes ends inside a frame; the batch is truncated, resend it"
            )
        remaining = decoder.unused_data + remaining[position:]
    return b"".join(pieces)


def _zstd_output_bound(data: bytes, limit: int) -> int:
    """An upper bound of what the zstd frames in `data` decompress to, read from their headers
    (RFC 8878 §3.1): a raw or run-length block regenerates its declared size, a compressed block at
    most 128 KiB, a skippable frame nothing. Stops once past `limit`; a header it cannot read (the
    decoder then refuses it) counts as past the limit."""
    bound = position = 0
    while position < len(data) and bound <= limit:
        if len(data) - position < 8:
            return limit + 1
        magic = int.from_bytes(data[position : position + 4], "little")
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE_MAGIC:
            position += 8 + int.from_bytes(data[position + 4 : position + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            return limit + 1
        descriptor = data[position + 4]
        single_segment = descriptor >> 5 & 1
        content_size_bytes = (0, 2, 4, 8)[descriptor >> 6] or single_segment
        position += 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3] + content_size_bytes
        last = False
        while not last and bound <= limit:
            if len(data) - position < 3:
                return limit + 1
            header = int.from_bytes(data[position : position + 3], "little")
            last, block_type, block_size = bool(header & 1), header >> 1 & 3, header >> 3
            if block_type == 3 or block_size > _ZSTD_BLOCK_MAX:
                return limit + 1
            bound += _ZSTD_BLOCK_MAX if block_type == 2 else block_size
            position += 3 + (1 if block_type == 1 else block_size)
        position += 4 * (descriptor >> 2 & 1)  # the content checksum
    return bound
