"""`codecs.fused.encode_with_feedback` against its reference, `ErrorFeedback(codec).encode(start - end)`.

The fused path works block by block; blocks are made tiny here (one or two chunks) so that hypothesis's
small vectors still cross block and tensor boundaries in every way.
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
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.codecs import fused
from trolly.compute.codecs.quantize import SIGN_CHUNK
from trolly.compute.errors import CodecError

finite = st.floats(min_value=-1000, max_value=1000, allow_nan=False, allow_infinity=False, width=32)


def split(flat: np.ndarray, cuts: list[int]) -> dict[str, torch.Tensor]:
    """Named tensors of the sizes `cuts` gives, names chosen so that the canonical order is not insertion order."""
    tensors, begin = {}, 0
    for index, size in enumerate(cuts):
        tensors[f"t{(7 * index) % 10}.{index}"] = torch.from_numpy(flat[begin:begin + size].copy())
        begin += size
    return tensors


def reference(codec_name, start, end, residual):
    feedback = ErrorFeedback(get_codec(codec_name))
    if residual is not None:
        feedback.load_state(residual)
    data, _ = feedback.encode({name: start[name] - end[name] for name in end})
    return data, feedback.residual


@st.composite
def updates(draw):
    size = draw(st.integers(1, 5 * SIGN_CHUNK + 9))
    cuts, left = [], size
    while left:
        take = draw(st.integers(1, left))
        cuts.append(take)
        left -= take
    start = draw(hnp.arrays(np.float32, size, elements=finite))
    moved = draw(hnp.arrays(np.float32, size, elements=st.floats(-1, 1, width=32)))
    residual = draw(st.none() | hnp.arrays(np.float32, size, elements=st.floats(-0.5, 0.5, width=32)))
    end = (start - moved).astype(np.float32)
    return (split(start, cuts), split(end, cuts),
            None if residual is None else split(residual, cuts))


@pytest.mark.parametrize("codec_name", ["sign", "ternary"])
@pytest.mark.parametrize("block_chunks", [1, 2, fused.BLOCK_CHUNKS])
@settings(max_examples=40, deadline=None)
@given(update=updates())
def test_the_fused_update_is_the_reference_bit_for_bit(codec_name, block_chunks, update):
    start, end, residual = update
    expected, expected_residual = reference(codec_name, start, end, residual)
    residual_bytes, residual_out = allocate_canonical(end)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused, "BLOCK_CHUNKS", block_chunks)
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


@pytest.mark.parametrize("codec_name", ["int8", "topk-int8", "fp32"])
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
