"""The fused top-k update (`codecs.topk_fused`, through `fused.encode_with_feedback`) against its reference,
`ErrorFeedback(TopKCodec).encode(start - end)`: the same bytes and the same residual, bit for bit.

The fused selection compares magnitudes by their bit patterns and finds the k-th largest digit by digit; the
cases here make it choose among ties (zeros of both signs, repeated values), values that differ only in their
last bits (the third digit decides), subnormals, and chunks of every length. Small chunks (`TopKCodec(...,
chunk=...)`, the same code with another chunk size) let hypothesis cross chunk and tensor boundaries.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trolly.compute.canonical import decode_tensors
from trolly.compute.canonical_copy import allocate_canonical
from trolly.compute.codecs import CODEC_REGISTRY, TopKCodec, fused, get_codec
from trolly.compute.errors import CodecError

from codec_helpers import draw_cuts, model_sized_update, reference, split

TOPK_NAMES = sorted(name for name, codec in CODEC_REGISTRY.items() if isinstance(codec, TopKCodec))
SMALL_CODECS = [TopKCodec(f"topk-{value_format}-{density}-{chunk}", density, value_format, chunk=chunk)
                for value_format in ("fp32", "fp16", "int8")
                for density, chunk in ((Fraction(1, 8), 64), (Fraction(1, 3), 10), (Fraction(1), 7), (Fraction(1, 64), 256))]

TIES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0 ** -140, -(2.0 ** -140), 1.0000001, -1.0000001]
values = st.one_of(st.sampled_from(TIES), st.floats(-100, 100, allow_nan=False, allow_infinity=False, width=32))


def assert_fused_is_reference(codec, start, end, residual=None):
    expected, expected_residual = reference(codec, start, end, residual)
    residual_bytes, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(codec, start, end, residual, residual_out) == expected
    stored = decode_tensors(bytes(residual_bytes))  # written straight into its canonical bytes
    for name in end:
        assert stored[name].numpy().tobytes() == expected_residual[name].numpy().tobytes(), name


@st.composite
def updates(draw):
    size = draw(st.integers(1, 5 * 64 + 9))
    cuts = draw_cuts(draw, st.integers, size)
    start = draw(hnp.arrays(np.float32, size, elements=values))
    end = draw(st.just(np.zeros(size, np.float32)) | hnp.arrays(np.float32, size, elements=values))
    residual = draw(st.none() | hnp.arrays(np.float32, size, elements=values))
    return split(start, cuts), split(end, cuts), None if residual is None else split(residual, cuts)


@pytest.mark.parametrize("codec", SMALL_CODECS, ids=lambda codec: codec.name)
@settings(max_examples=60, deadline=None)
@given(update=updates())
def test_the_fused_top_k_update_is_the_reference_bit_for_bit(codec, update):
    assert_fused_is_reference(codec, *update)


@pytest.mark.parametrize("codec_name", TOPK_NAMES)
def test_a_model_sized_update_is_the_reference_for_every_registered_top_k_codec(codec_name):
    start, end, residual = model_sized_update()
    assert_fused_is_reference(get_codec(codec_name), start, end, None)
    assert_fused_is_reference(get_codec(codec_name), start, end, residual)


@pytest.mark.parametrize("codec_name", TOPK_NAMES)
def test_ties_go_to_the_lower_index_in_chunks_of_equal_magnitudes(codec_name):
    size = 3 * 65536 + 123
    alternating = np.where(np.arange(size) % 2 == 0, 1.0, -1.0).astype(np.float32)  # every magnitude the same
    zeros = np.zeros(size, np.float32)
    zeros[::3] = -0.0
    for flat in (alternating, zeros):
        start = {"w": torch.from_numpy(flat.copy())}
        assert_fused_is_reference(get_codec(codec_name), start, {"w": torch.zeros(size)})


@pytest.mark.parametrize("codec_name", TOPK_NAMES)
def test_magnitudes_that_differ_only_in_their_last_bits_are_ordered_exactly(codec_name):
    # 1.0 plus 0..4095 ulps, shuffled: one first digit, sixteen second digits, the third digit decides
    ulps = np.random.default_rng(3).permutation(2 * 65536) % 4096
    flat = (np.float32(1.0).view(np.uint32) + ulps.astype(np.uint32)).view(np.float32)
    flat = np.where(np.arange(len(flat)) % 5 == 0, -flat, flat).astype(np.float32)
    start = {"w": torch.from_numpy(flat.copy())}
    assert_fused_is_reference(get_codec(codec_name), start, {"w": torch.zeros(len(flat))})


def test_subnormal_and_huge_magnitudes_are_ordered_as_values(codec_name="topk"):
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 0x7F800000, size=65536 + 77, dtype=np.uint32)  # every finite magnitude, subnormals too
    flat = bits.view(np.float32) * np.where(rng.random(len(bits)) < 0.5, -1, 1).astype(np.float32)
    start = {"w": torch.from_numpy(flat.astype(np.float32))}
    assert_fused_is_reference(get_codec(codec_name), start, {"w": torch.zeros(len(flat))})


@pytest.mark.parametrize("codec_name", TOPK_NAMES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_are_refused_with_the_tensors_name(codec_name, bad):
    start = {"a": torch.zeros(70000), "b": torch.tensor([1.0, bad, 2.0])}
    end = {"a": torch.zeros(70000), "b": torch.zeros(3)}
    _, residual_out = allocate_canonical(end)
    with pytest.raises(CodecError, match="'b' has NaN or infinite values"):
        fused.encode_with_feedback(get_codec(codec_name), start, end, None, residual_out)
    with pytest.raises(CodecError, match="'b' has NaN or infinite values"):  # the reference says the same
        reference(get_codec(codec_name), start, end, None)


def test_fp16_values_beyond_its_range_are_refused_as_by_the_reference():
    start = {"w": torch.tensor([70000.0, 1.0, 2.0] * 30)}
    end = {"w": torch.zeros(90)}
    codec = TopKCodec("topk-fp16-test", Fraction(1, 8), "fp16", chunk=64)
    residual_bytes, residual_out = allocate_canonical(end)
    before = bytes(residual_bytes)
    with pytest.raises(CodecError, match="fp16 cannot carry"):
        fused.encode_with_feedback(codec, start, end, None, residual_out)
    with pytest.raises(CodecError, match="fp16 cannot carry"):
        reference(codec, start, end, None)
    assert bytes(residual_bytes) == before  # nothing written on the way to the error


def test_a_chunk_size_a_16_bit_index_cannot_address_is_refused():
    with pytest.raises(CodecError, match="chunk must be"):
        TopKCodec("topk-too-wide", Fraction(1, 64), "int8", chunk=65537)
