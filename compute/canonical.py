"""Canonical bytes for named tensors: the one byte form that weights, checkpoints and shards are hashed in.

Layout (all integers little-endian):

    magic   b"TRLT"  version u8 = 1   count u32
    count x entry, in ascending order of name (UTF-8 bytes):
        name_length u16   name (UTF-8)   dtype u8 (DTYPE_CODES)   ndim u8   ndim x dim u64
        data: the elements in row-major order, little-endian, no padding

The order is fixed by the names, never by insertion order, so two parties that hold the same tensors always
produce the same bytes. Encoding streams: `iter_chunks` yields the header pieces and zero-copy views of the
tensor memory, so hashing (which releases the GIL for large buffers) can run beside training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import struct
import warnings
from collections.abc import Iterator, Mapping

import numpy as np
import torch

from .errors import EncodingError

MAGIC = b"TRLT"
VERSION = 1

DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.float16: 2,
    torch.float64: 3,
    torch.int64: 4,
    torch.int32: 5,
    torch.uint8: 6,
    torch.int8: 7,
}
CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
NUMPY_DTYPES = {
    1: np.dtype("<f4"), 2: np.dtype("<f2"), 3: np.dtype("<f8"), 4: np.dtype("<i8"),
    5: np.dtype("<i4"), 6: np.dtype("u1"), 7: np.dtype("i1"),
}

MAX_NAME_BYTES = 1024
MAX_DIMS = 8
MAX_ELEMENTS = 2**31
"""Largest element count a tensor's non-zero dimensions may multiply to (numpy's index range is the limit)."""


def _as_little_endian_array(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype not in DTYPE_CODES:
        raise EncodingError(f"dtype {tensor.dtype} has no canonical code")
    array = tensor.detach().cpu().contiguous().numpy()
    # A no-op on little-endian hosts; on others it converts once.
    return np.ascontiguousarray(array, dtype=NUMPY_DTYPES[DTYPE_CODES[tensor.dtype]])


def canonical_names(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    return sorted(tensors, key=lambda name: name.encode("utf-8"))


def file_header(count: int) -> bytes:
    return MAGIC + struct.pack("<BI", VERSION, count)


def entry_header(name: str, tensor: torch.Tensor) -> bytes:
    """Name, dtype and shape of one entry, checked."""
    if not isinstance(tensor, torch.Tensor):
        raise EncodingError(f"{name!r} is not a tensor")
    if tensor.dtype not in DTYPE_CODES:
        raise EncodingError(f"dtype {tensor.dtype} has no canonical code")
    name_bytes = name.encode("utf-8")
    if len(name_bytes) > MAX_NAME_BYTES:
        raise EncodingError(f"tensor name longer than {MAX_NAME_BYTES} bytes: {name[:40]!r}...")
    if tensor.dim() > MAX_DIMS:
        raise EncodingError(f"{name!r} has {tensor.dim()} dimensions, at most {MAX_DIMS} are allowed")
    header = struct.pack("<H", len(name_bytes)) + name_bytes
    header += struct.pack("<BB", DTYPE_CODES[tensor.dtype], tensor.dim())
    return header + b"".join(struct.pack("<Q", size) for size in tensor.shape)


def iter_chunks(tensors: Mapping[str, torch.Tensor]) -> Iterator[bytes | memoryview]:
    """Yield the canonical encoding of `tensors` piece by piece (views share the tensors' memory)."""
    names = canonical_names(tensors)
    yield file_header(len(names))
    for name in names:
        tensor = tensors[name]
        header = entry_header(name, tensor)
        array = _as_little_endian_array(tensor)
        yield header
        if array.size:
            yield memoryview(array).cast("B")


def encode_tensors(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """The canonical bytes of `tensors`."""
    return b"".join(iter_chunks(tensors))


def encode_tensors_into_buffer(tensors: Mapping[str, torch.Tensor]) -> bytearray:
    """The canonical bytes in a bytearray, assembled with numpy copies that release the GIL, so that a
    background thread building a checkpoint does not hold up the training thread for the whole copy."""
    chunks = list(iter_chunks(tensors))
    buffer = bytearray(sum(len(chunk) for chunk in chunks))
    target = np.frombuffer(buffer, dtype=np.uint8)
    offset = 0
    for chunk in chunks:
        size = len(chunk)
        target[offset:offset + size] = np.frombuffer(chunk, dtype=np.uint8)
        offset += size
    return buffer


def hash_tensors(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """sha256 of the canonical bytes, computed without building them in one piece."""
    digest = hashlib.sha256()
    for chunk in iter_chunks(tensors):
        digest.update(chunk)
    return digest.digest()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor of canonical bytes, read from its header: where its data sits, nothing copied yet."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    size: int  # bytes of data


def read_entries(data: bytes | bytearray | memoryview) -> list[Entry]:
    """Every entry's name, dtype, shape and data position, checked against the bytes' length, without copying
    any data: a caller checks them (against a model, `compute/model_layout.py`) before anything is decoded. Strict:
    rejects any deviation, so that decode(encode(x)) is the only way to reach a given byte string."""
    view = memoryview(data).cast("B")
    if len(view) < 9 or bytes(view[:4]) != MAGIC:
        raise EncodingError("not canonical tensor bytes (bad magic)")
    version, count = struct.unpack_from("<BI", view, 4)
    if version != VERSION:
        raise EncodingError(f"unsupported canonical tensor version {version}")
    if count > len(view) // 4:  # each entry takes at least 4 bytes: a forged count cannot make us loop
        raise EncodingError(f"declares {count} tensors in {len(view)} bytes")
    offset = 9
    entries: list[Entry] = []
    previous: bytes | None = None
    try:
        for _ in range(count):
            (name_length,) = struct.unpack_from("<H", view, offset)
            offset += 2
            name_bytes = bytes(view[offset:offset + name_length])
            if len(name_bytes) != name_length:
                raise EncodingError("truncated tensor name")
            offset += name_length
            if previous is not None and name_bytes <= previous:
                raise EncodingError("tensor names are not in strictly ascending order")
            previous = name_bytes
            code, ndim = struct.unpack_from("<BB", view, offset)
            offset += 2
            if code not in CODE_DTYPES:
                raise EncodingError(f"unknown dtype code {code}")
            if ndim > MAX_DIMS:
                raise EncodingError(f"too many dimensions ({ndim})")
            shape = struct.unpack_from("<" + "Q" * ndim, view, offset)
            offset += 8 * ndim
            if math.prod(d for d in shape if d) > MAX_ELEMENTS:  # e.g. (0, 2^63): no data, but no array either
                raise EncodingError(f"tensor {name_bytes.decode('utf-8', 'replace')!r} declares the shape "
                                    f"{list(shape)}, too large")
            size = math.prod(shape) * NUMPY_DTYPES[code].itemsize  # Python integers: a forged shape cannot overflow
            if offset + size > len(view):
                raise EncodingError(f"truncated data for tensor {name_bytes.decode('utf-8', 'replace')!r}")
            entries.append(Entry(name_bytes.decode("utf-8"), CODE_DTYPES[code], tuple(shape), offset, size))
            offset += size
    except struct.error as error:
        raise EncodingError(f"truncated canonical tensor bytes: {error}") from None
    except UnicodeDecodeError:
        raise EncodingError("tensor name is not valid UTF-8") from None
    if offset != len(view):
        raise EncodingError(f"{len(view) - offset} trailing bytes after the last tensor")
    return entries


def decode_entries(data: bytes | bytearray | memoryview, entries: list[Entry], *,
                   copy: bool = True) -> dict[str, torch.Tensor]:
    """The tensors of entries read by `read_entries` from the same bytes, in canonical order: copies, or
    (`copy=False`) views of `data` itself, for a caller that only reads them (writing into views of immutable
    bytes is undefined), such as a replay's start checkpoint, which `Trainer.load` copies anyway."""
    view = memoryview(data).cast("B")
    tensors: dict[str, torch.Tensor] = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for entry in entries:
            numpy_dtype = NUMPY_DTYPES[DTYPE_CODES[entry.dtype]]
            array = np.frombuffer(view, dtype=numpy_dtype, count=math.prod(entry.shape), offset=entry.offset)
            native = array.reshape(entry.shape).astype(numpy_dtype.newbyteorder("="), copy=copy)
            tensors[entry.name] = torch.from_numpy(native)
    return tensors


def decode_tensors(data: bytes | bytearray | memoryview) -> dict[str, torch.Tensor]:
    """Parse canonical bytes back into tensors (in canonical order). Strict: see `read_entries`."""
    return decode_entries(data, read_entries(data))
