"""The codec interface and the framing every encoded update shares.

An update is a set of named float32 tensors (a pseudo-gradient). A codec flattens them in canonical order
(ascending name), compresses the flat vector and frames it:

    magic b"TRCU"  version u8 = 1  codec_name_length u8  codec_name  count u32
    count x (name_length u16, name, ndim u8, ndim x dim u64)      ascending name order
    payload (codec specific, see each codec)

Encoding is a pure function of the input values: same tensors, same bytes, on every machine (numpy's
elementwise float32 arithmetic and rounding are IEEE-exact). The bytes are what is hashed and committed.
"""

from __future__ import annotations

import abc
import math
import struct
from collections.abc import Mapping

import numpy as np
import torch

from ..errors import CodecError

MAGIC = b"TRCU"
VERSION = 1
MAX_TENSORS = 4096


class Codec(abc.ABC):
    """Compresses a named set of float32 tensors to deterministic bytes and back."""

    name: str

    def encode(self, tensors: Mapping[str, torch.Tensor]) -> bytes:
        header, flat, _ = self.flatten(tensors)
        return header + self.encode_flat(flat)

    def encode_and_decode(self, tensors: Mapping[str, torch.Tensor]) -> tuple[bytes, dict[str, torch.Tensor]]:
        """The encoded bytes and what they decode to (what every receiver applies), as error feedback needs
        both. A codec may override this with a quicker way to the very same result (the tests compare)."""
        data = self.encode(tensors)
        return data, self.decode(data)

    def flatten(self, tensors: Mapping[str, torch.Tensor]) -> tuple[bytes, np.ndarray, list[tuple[str, tuple[int, ...]]]]:
        """The framing header, the flat little-endian float32 vector in canonical order, and the layout."""
        header, layout = self.frame(tensors)
        arrays = []
        for name, _ in layout:
            array = tensors[name].detach().cpu().to(torch.float32).contiguous().numpy().reshape(-1)
            if not np.isfinite(array).all():
                raise CodecError(f"{name!r} has NaN or infinite values")
            arrays.append(array)
        flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32)
        return header, flat.astype("<f4", copy=False), layout

    def frame(self, tensors: Mapping[str, torch.Tensor]) -> tuple[bytes, list[tuple[str, tuple[int, ...]]]]:
        """The framing header of an update of these tensors, and their layout (canonical order), checked."""
        names = sorted(tensors, key=lambda n: n.encode("utf-8"))
        if len(names) > MAX_TENSORS:
            raise CodecError(f"too many tensors ({len(names)})")
        layout = []
        header = [MAGIC, struct.pack("<BB", VERSION, len(self.name)), self.name.encode("ascii"), struct.pack("<I", len(names))]
        for name in names:
            tensor = tensors[name]
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                raise CodecError(f"{name!r} is not a floating-point tensor")
            layout.append((name, tuple(tensor.shape)))
            name_bytes = name.encode("utf-8")
            header.append(struct.pack("<H", len(name_bytes)) + name_bytes + struct.pack("<B", tensor.dim()))
            header.append(b"".join(struct.pack("<Q", d) for d in tensor.shape))
        return b"".join(header), layout

    def decode(self, data: bytes, expected: list[tuple[str, tuple[int, ...]]] | None = None) -> dict[str, torch.Tensor]:
        """The tensors an update's bytes decode to; CodecError when they are malformed. With `expected` (the
        task model's layout, `compute.model_layout.ModelLayout.update`), the declared names and shapes must be
        exactly those, checked before the payload is touched."""
        view = memoryview(data).cast("B")
        try:
            if bytes(view[:4]) != MAGIC:
                raise CodecError("not an encoded update (bad magic)")
            version, name_length = struct.unpack_from("<BB", view, 4)
            if version != VERSION:
                raise CodecError(f"unsupported update version {version}")
            codec_name = bytes(view[6:6 + name_length]).decode("ascii")
            if codec_name != self.name:
                raise CodecError(f"update was encoded with {codec_name!r}, not {self.name!r}")
            offset = 6 + name_length
            (count,) = struct.unpack_from("<I", view, offset)
            offset += 4
            if count > MAX_TENSORS:
                raise CodecError(f"too many tensors ({count})")
            layout: list[tuple[str, tuple[int, ...]]] = []
            for _ in range(count):
                (length,) = struct.unpack_from("<H", view, offset)
                name = bytes(view[offset + 2:offset + 2 + length]).decode("utf-8")
                offset += 2 + length
                (ndim,) = struct.unpack_from("<B", view, offset)
                shape = struct.unpack_from("<" + "Q" * ndim, view, offset + 1)
                offset += 1 + 8 * ndim
                layout.append((name, tuple(shape)))
        except (struct.error, UnicodeDecodeError) as error:
            raise CodecError(f"malformed update header: {error}") from None
        if [n for n, _ in layout] != sorted((n for n, _ in layout), key=lambda n: n.encode("utf-8")):
            raise CodecError("update tensors are not in canonical order")
        if expected is not None and layout != list(expected):
            raise CodecError(_layout_difference(layout, list(expected)))
        for name, shape in layout:  # numpy refuses shapes whose non-zero dimensions multiply past its index range
            if math.prod(d for d in shape if d) > 2**31:
                raise CodecError(f"update tensor {name!r} declares the shape {list(shape)}, too large")
        sizes = [math.prod(shape) for _, shape in layout]  # Python integers: no overflow on forged shapes
        total = sum(sizes)
        if total > 2**31:
            raise CodecError(f"update declares {total} elements, too many")
        flat = self.decode_flat(view[offset:], total)
        if flat.shape != (total,):
            raise CodecError("payload does not match the declared sizes")  # pragma: no cover - decode_flat checks
        return unflatten(flat, layout)

    @abc.abstractmethod
    def encode_flat(self, flat: np.ndarray) -> bytes:
        """Payload for a flat little-endian float32 vector."""

    @abc.abstractmethod
    def decode_flat(self, payload: memoryview, size: int) -> np.ndarray:
        """The flat float32 vector of `size` elements; CodecError if the payload does not fit."""


def _layout_difference(declared: list[tuple[str, tuple[int, ...]]], expected: list[tuple[str, tuple[int, ...]]]) -> str:
    for (name, shape), (want_name, want_shape) in zip(declared, expected):
        if name != want_name:
            return f"the update declares {name!r} where the task's model has {want_name!r}"
        if shape != want_shape:
            return f"the update declares {name!r} as {list(shape)}, the task's model has {list(want_shape)}"
    return f"the update declares {len(declared)} tensors, the task's model has {len(expected)}"


def unflatten(flat: np.ndarray, layout: list[tuple[str, tuple[int, ...]]], copy: bool = True) -> dict[str, torch.Tensor]:
    """Named float32 tensors from a flat vector laid out as `layout` says: copies, or (`copy=False`, for a
    float32 vector nobody else holds) views of it."""
    result: dict[str, torch.Tensor] = {}
    begin = 0
    for name, shape in layout:
        size = math.prod(shape)
        result[name] = torch.from_numpy(flat[begin:begin + size].astype(np.float32, copy=copy).reshape(shape))
        begin += size
    return result


def take(payload: memoryview, offset: int, dtype: str, count: int) -> tuple[np.ndarray, int]:
    """`count` elements of `dtype` from payload[offset:], raising CodecError when it is too short."""
    item = np.dtype(dtype)
    end = offset + count * item.itemsize
    if end > len(payload):
        raise CodecError("update payload is truncated")
    return np.frombuffer(payload, dtype=item, count=count, offset=offset), end


def finish(payload: memoryview, offset: int) -> None:
    if offset != len(payload):
        raise CodecError(f"{len(payload) - offset} unexpected bytes after the update payload")
