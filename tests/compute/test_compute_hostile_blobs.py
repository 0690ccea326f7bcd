"""Hostile blobs (issue 19 item 2): every decoder fails with its own ComputeError, never anything else.

Checkpoints, residuals and updates come from other parties and are only hash-checked against what those
parties committed, so their bytes may declare anything. Property tests throw forged headers (zero
dimensions, 2^31 elements, too many tensors), truncations and random bytes at the canonical decoder, the
checkpoint decoder with the model's layout, and every codec's decoder with and without the expected layout.
"""

from __future__ import annotations

import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trolly.compute.canonical import encode_tensors, read_entries
from trolly.compute.checkpoints import TrainingState, decode_checkpoint, encode_checkpoint, final_state
from trolly.compute.codecs import CODEC_REGISTRY, get_codec
from trolly.compute.errors import CheckpointError, CodecError, ComputeError, EncodingError
from trolly.compute.model_layout import LayoutError, ModelLayout, check_blob, model_layout
from trolly.compute.models import DataShape
from trolly.compute.spec import example_spec, spec_from_dict

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHAPE = DataShape("classification", 64, 10)


def small_spec(codec: str = "topk-int8"):
    document = example_spec("00" * 32, model={"arch": "mlp", "config": {"hidden": [8]}})
    document["codec"] = codec
    return spec_from_dict(document)


LAYOUT = model_layout(small_spec(), SHAPE)


def model_weights() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return {name: torch.randn(shape, generator=generator) for name, (_, shape) in LAYOUT.weights.items()}


def checkpoint_bytes(final: bool = False) -> bytes:
    state = TrainingState.fresh(model_weights())
    return encode_checkpoint(final_state(state) if final else state)


def forged_canonical(name: str, shape: tuple[int, ...], data: bytes, dtype_code: int = 1) -> bytes:
    """One entry declaring `shape`, followed by whatever `data` is."""
    name_bytes = name.encode()
    header = b"TRLT" + struct.pack("<BI", 1, 1) + struct.pack("<H", len(name_bytes)) + name_bytes
    header += struct.pack("<BB", dtype_code, len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
    return header + data


def forged_update(codec: str, layout: list[tuple[str, tuple[int, ...]]], payload: bytes) -> bytes:
    header = [b"TRCU", struct.pack("<BB", 1, len(codec)), codec.encode(), struct.pack("<I", len(layout))]
    for name, shape in layout:
        header.append(struct.pack("<H", len(name)) + name.encode() + struct.pack("<B", len(shape)))
        header.append(b"".join(struct.pack("<Q", d) for d in shape))
    return b"".join(header) + payload


dimensions = st.lists(st.sampled_from([0, 1, 3, 1024, 2**16, 2**31, 2**31 + 1, 2**63]), min_size=0, max_size=4)


@SETTINGS
@given(shape=dimensions, data=st.binary(max_size=64), code=st.integers(0, 9))
def test_forged_canonical_shapes_fail_only_with_an_encoding_error(shape, data, code):
    blob = forged_canonical("weights/layers.0.weight", tuple(shape), data, code)
    try:
        read_entries(blob)
    except EncodingError:
        return
    # it parsed: the declared size matched the data exactly; the model check must then refuse it
    with pytest.raises((CheckpointError,)):
        decode_checkpoint(blob, LAYOUT)


@SETTINGS
@given(cut=st.integers(0, 10_000), final=st.booleans())
def test_truncated_checkpoints_fail_only_with_a_checkpoint_error(cut, final):
    data = checkpoint_bytes(final)
    with pytest.raises(CheckpointError):
        decode_checkpoint(data[:cut % len(data)], LAYOUT)


@SETTINGS
@given(position=st.integers(0, 10_000), value=st.integers(0, 255))
def test_checkpoints_with_a_flipped_header_byte_decode_or_fail_with_a_checkpoint_error(position, value):
    data = bytearray(checkpoint_bytes())
    entries = read_entries(bytes(data))
    header_end = entries[0].offset if entries else len(data)
    data[position % header_end] = value
    try:
        state = decode_checkpoint(bytes(data), LAYOUT)
    except CheckpointError:
        return
    assert {n: tuple(t.shape) for n, t in state.weights.items()} == {n: s for n, (_, s) in LAYOUT.weights.items()}


@SETTINGS
@given(data=st.binary(max_size=512))
def test_random_bytes_fail_only_with_compute_errors_everywhere(data):
    for decode in (lambda: decode_checkpoint(data, LAYOUT), lambda: check_blob(data, LAYOUT, "residual"),
                   *[lambda c=c: c.decode(data, LAYOUT.update()) for c in CODEC_REGISTRY.values()]):
        with pytest.raises(ComputeError):
            decode()


@SETTINGS
@given(codec=st.sampled_from(sorted(CODEC_REGISTRY)), shape=dimensions, payload=st.binary(max_size=256),
       with_layout=st.booleans())
def test_forged_update_headers_fail_only_with_a_codec_error(codec, shape, payload, with_layout):
    blob = forged_update(codec, [("layers.0.weight", tuple(shape))], payload)
    try:
        get_codec(codec).decode(blob, LAYOUT.update() if with_layout else None)
    except CodecError:
        return
    assert not with_layout  # the model has more than one tensor: a layout check can never pass this


@SETTINGS
@given(codec=st.sampled_from(sorted(CODEC_REGISTRY)), cut=st.integers(0, 100_000),
       position=st.integers(0, 100_000), value=st.integers(0, 255))
def test_damaged_real_updates_decode_or_fail_with_a_codec_error(codec, cut, position, value):
    encoded = get_codec(codec).encode(model_weights())
    damaged = bytearray(encoded[:max(1, cut % (len(encoded) + 1))])
    damaged[position % len(damaged)] = value
    try:
        decoded = get_codec(codec).decode(bytes(damaged), LAYOUT.update())
    except CodecError:
        return
    assert [(n, tuple(t.shape)) for n, t in decoded.items()] == LAYOUT.update()


def test_an_update_of_another_model_is_refused_before_its_payload_is_read():
    other = model_layout(spec_from_dict({**example_spec("00" * 32, model={"arch": "mlp", "config": {"hidden": [9]}})}),
                         SHAPE)
    weights = {name: torch.zeros(shape) for name, (_, shape) in other.weights.items()}
    encoded = get_codec("topk-int8").encode(weights)
    with pytest.raises(CodecError, match="task's model has"):
        get_codec("topk-int8").decode(encoded, LAYOUT.update())


def test_a_checkpoint_with_a_weight_of_the_wrong_shape_is_refused_before_decoding():
    weights = model_weights()
    name = next(iter(weights))
    weights[name] = torch.zeros(2, 2)
    with pytest.raises(CheckpointError, match="does not fit the task's model"):
        decode_checkpoint(encode_checkpoint(TrainingState.fresh(weights)), LAYOUT)


def test_a_residual_must_name_every_weight_of_the_model():
    weights = model_weights()
    weights.pop(next(iter(weights)))
    with pytest.raises(LayoutError, match="lacks"):
        check_blob(encode_tensors(weights), LAYOUT, "residual")


def test_a_residual_of_the_right_model_passes_the_layout_check():
    entries = check_blob(encode_tensors(model_weights()), LAYOUT, "residual")
    assert [e.name for e in entries] == sorted(LAYOUT.weights)


def test_layout_is_built_without_memory_and_matches_the_real_model():
    from trolly.compute.training import initial_weights
    real = initial_weights(small_spec(), SHAPE)
    assert LAYOUT == ModelLayout({n: (t.dtype, tuple(t.shape)) for n, t in real.items()})


@pytest.mark.parametrize("shape", [(0, 2**31, 2**31), (0, 2**63), (2**31 + 1,)])
def test_a_shape_too_large_for_an_array_is_an_error_even_with_no_data(shape):
    with pytest.raises(EncodingError, match="too large|truncated"):
        read_entries(forged_canonical("weights/x", shape, b""))
    with pytest.raises(CodecError, match="too large|too many"):
        get_codec("fp16").decode(forged_update("fp16", [("x", shape)], b""))
