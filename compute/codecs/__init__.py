"""Update codecs behind one interface (`Codec.encode` / `Codec.decode`) and one registry.

A task spec names its codec; every name here is fixed forever (the chain validates names as strings):

    fp32        no compression (reference)                          4 bytes / value
    fp16        IEEE half                                            2 bytes / value
    int8        int8, one float32 scale per 4,096 values             ~1 byte / value
    sign        sign bit times the mean magnitude of each 1,024      ~1 bit / value
    ternary     -s, 0 or +s: a bitmap of the values above 3/4 of       ~1.6 bits / value
                each 1,024-chunk's mean magnitude, and their signs
    topk        top 1/64 by magnitude, fp32 values, u16 indices      6 bytes / kept value
    topk-fp16   top 1/64, fp16 values                                4 bytes / kept value
    topk-int8   top 1/64, int8 values, a scale per 65,536-chunk      3 bytes / kept value
    topk-int8-sparse  top 1/256, int8 values                         3 bytes / kept value

Lossy codecs are meant to be used through `ErrorFeedback`, which keeps what was not sent for next time.
"""

from __future__ import annotations

from fractions import Fraction

from ..errors import CodecError
from .base import Codec
from .feedback import ErrorFeedback
from .quantize import Float16Codec, Float32Codec, Int8Codec, SignCodec
from .ternary import TernaryCodec
from .topk import TopKCodec

TOPK_DENSITY = Fraction(1, 64)
SPARSE_TOPK_DENSITY = Fraction(1, 256)

CODEC_REGISTRY: dict[str, Codec] = {
    codec.name: codec
    for codec in (
        Float32Codec(),
        Float16Codec(),
        Int8Codec(),
        SignCodec(),
        TernaryCodec(),
        TopKCodec("topk", TOPK_DENSITY, "fp32"),
        TopKCodec("topk-fp16", TOPK_DENSITY, "fp16"),
        TopKCodec("topk-int8", TOPK_DENSITY, "int8"),
        TopKCodec("topk-int8-sparse", SPARSE_TOPK_DENSITY, "int8"),
    )
}


def get_codec(name: str) -> Codec:
    try:
        return CODEC_REGISTRY[name]
    except KeyError:
        raise CodecError(f"unknown codec {name!r}; known: {', '.join(sorted(CODEC_REGISTRY))}") from None


__all__ = ["CODEC_REGISTRY", "Codec", "ErrorFeedback", "TopKCodec", "get_codec"]
