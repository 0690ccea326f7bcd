"""`codecs.fused.encode_with_feedback` against its reference, `ErrorFeedback(codec).encode(start - end)`.

The fused path runs one compiled loop over 1,024-value chunks of the flattened update; hypothesis's vectors
of up to five chunks cross chunk and tensor boundaries in every way, with a partial last chunk or none.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trolly.compute.canonical import decode_tensors
from trolly.compute.canonical_copy import allocate_canonical
from trolly.compute.codecs import get_codec
from trolly.compute.codecs import fused
from trolly.compute.codecs.quantize import SIGN_CHUNK, fixed_tree_sum
from trolly.compute.errors import CodecError

from codec_helpers import draw_cuts, model_sized_update, reference, split

finite = st.floats(min_value=-1000, max_value=1000, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def updates(draw):
    size = draw(st.integers(1, 5 * SIGN_CHUNK + 9))
    cuts = draw_cuts(draw, st.integers, size)
    start = draw(hnp.arrays(np.float32, size, elements=finite))
    moved = draw(hnp.arrays(np.float32, size, elements=st.floats(-1, 1, width=32)))
    residual = draw(st.none() | hnp.arrays(np.float32, size, elements=st.floats(-0.5, 0.5, width=32)))
    end = (start - moved).astype(np.float32)
    return (split(start, cuts), split(end, cuts),
            None if residual is None else split(residual, cuts))


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
@settings(max_examples=120, deadline=None)
@given(update=updates())
def test_the_fused_update_is_the_reference_bit_for_bit(codec_name, update):
    start, end, residual = update
    expected, expected_residual = reference(codec_name, start, end, residual)
    residual_bytes, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(get_codec(codec_name), start, end, residual, residual_out) == expected
    stored = decode_tensors(bytes(residual_bytes))  # written straight into its canonical bytes
    for name in end:
        assert stored[name].numpy().tobytes() == expected_residual[name].numpy().tobytes()


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
def test_negative_zero_is_sent_as_positive_as_in_the_reference(codec_name):
    start = {"w": torch.tensor([-0.0, 0.0, -0.0, 2.0, -3.0])}
    end = {"w": torch.tensor([0.0, 0.0, -0.0, 1.0, 0.0])}  # pseudo-gradient -0.0, 0.0, 0.0, 1.0, -3.0
    expected, expected_residual = reference(codec_name, start, end, None)
    _, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(get_codec(codec_name), start, end, None, residual_out) == expected
    assert residual_out["w"].numpy().tobytes() == expected_residual["w"].numpy().tobytes()


@pytest.mark.parametrize("codec_name", ["int8", "fp16", "fp32"])
def test_other_codecs_take_the_reference_path(codec_name):
    generator = torch.Generator().manual_seed(2)
    start = {"b": torch.randn(3000, generator=generator), "a": torch.randn(40, 70, generator=generator)}
    end = {name: tensor - 0.01 * torch.randn(tensor.shape, generator=generator) for name, tensor in start.items()}
    residual = {name: 0.001 * torch.randn(tensor.shape, generator=generator) for name, tensor in start.items()}
    expected, expected_residual = reference(codec_name, start, end, residual)
    _, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(get_codec(codec_name), start, end, residual, residual_out) == expected
    assert all(torch.equal(residual_out[name], expected_residual[name]) for name in end)


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_values_are_refused_with_the_tensors_name(codec_name, bad):
    start = {"a": torch.zeros(3000), "b": torch.tensor([1.0, bad, 2.0])}
    end = {"a": torch.zeros(3000), "b": torch.zeros(3)}
    _, residual_out = allocate_canonical(end)
    with pytest.raises(CodecError, match="'b' has NaN or infinite values"):
        fused.encode_with_feedback(get_codec(codec_name), start, end, None, residual_out)
    with pytest.raises(CodecError, match="'b' has NaN or infinite values"):  # the reference says the same
        reference(codec_name, start, end, None)


def test_mismatched_names_or_shapes_are_refused():
    start = {"a": torch.zeros(4)}
    _, residual_out = allocate_canonical(start)
    with pytest.raises(CodecError, match="name different tensors"):
        fused.encode_with_feedback(get_codec("sign"), start, {"b": torch.zeros(4)}, None, residual_out)
    with pytest.raises(CodecError, match="different shapes"):
        fused.encode_with_feedback(get_codec("sign"), start, {"a": torch.zeros(2, 2)}, None, residual_out)


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
def test_chunk_sums_follow_the_fixed_tree_where_another_order_would_round_differently(codec_name):
    # A chunk whose exact mean sits just above a float32 rounding midpoint: 511 ones and 1 + 2**-15 (mean
    # 0.5 + 2**-25, the midpoint) plus 512 values of 2**-44, which the tree adds among themselves first
    # (2**-35 in all) while a running sum drops each one (half an ulp of 512, rounded to even).
    chunk = np.concatenate([np.ones(511), [1 + 2.0 ** -15], np.full(512, 2.0 ** -44)]).astype(np.float32)
    running = np.float64(0.0)
    for value in chunk.astype(np.float64):
        running += value
    tree = fixed_tree_sum(chunk.astype(np.float64)[None, :])[0]
    assert np.float32(running / SIGN_CHUNK) != np.float32(tree / SIGN_CHUNK)  # so the order shows in the scale
    values = np.concatenate([chunk, -chunk[::-1], chunk[:100]])
    values[7::31] *= -1
    start = {"w": torch.from_numpy(values)}
    end = {"w": torch.zeros(len(values))}
    expected, expected_residual = reference(codec_name, start, end, None)
    _, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(get_codec(codec_name), start, end, None, residual_out) == expected
    assert residual_out["w"].numpy().tobytes() == expected_residual["w"].numpy().tobytes()


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
def test_a_model_sized_update_is_the_reference(codec_name):
    start, end, residual = model_sized_update()
    expected, expected_residual = reference(codec_name, start, end, residual)
    _, residual_out = allocate_canonical(end)
    assert fused.encode_with_feedback(get_codec(codec_name), start, end, residual, residual_out) == expected
    assert all(torch.equal(residual_out[name], expected_residual[name]) for name in end)


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
def test_an_update_that_overflows_from_finite_weights_is_refused_with_the_tensors_name(codec_name):
    start = {"a": torch.zeros(3000), "b": torch.tensor([3e38, 1.0, 2.0])}
    end = {"a": torch.zeros(3000), "b": torch.tensor([-3e38, 0.0, 0.0])}  # 3e38 - -3e38 is inf in float32
    _, residual_out = allocate_canonical(end)
    with pytest.raises(CodecError, match="'b' has NaN or infinite values"):
        fused.encode_with_feedback(get_codec(codec_name), start, end, None, residual_out)
