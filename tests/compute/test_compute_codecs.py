"""Every codec: deterministic bytes, a round trip within its error bound, strict decoding."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trolly.compute.codecs import CODEC_REGISTRY, ErrorFeedback, get_codec
from trolly.compute.codecs.quantize import CHUNK as INT8_CHUNK, SIGN_CHUNK
from trolly.compute.codecs.ternary import TERNARY_CHUNK
from trolly.compute.codecs.topk import CHUNK as TOPK_CHUNK, kept_per_chunk, select_top
from trolly.compute.errors import CodecError

finite = st.floats(min_value=-1000, max_value=1000, allow_nan=False, allow_infinity=False, width=32)
arrays = hnp.arrays(np.float32, st.integers(1, 3000), elements=finite)


def as_update(flat: np.ndarray) -> dict[str, torch.Tensor]:
    """Split a flat vector into a few named tensors of different shapes."""
    cut = len(flat) // 3
    return {"layer.weight": torch.from_numpy(flat[:cut * 2].copy()).reshape(2, -1) if cut else torch.zeros(2, 0),
            "layer.bias": torch.from_numpy(flat[cut * 2:].copy()), "a.scalar": torch.tensor(0.5)}


def flatten(update):
    return np.concatenate([update[n].numpy().reshape(-1) for n in sorted(update)])


def error_bound(name: str, flat: np.ndarray) -> np.ndarray:
    """Largest allowed |decoded - original| per element, from each codec's documented guarantee."""
    magnitude = np.abs(flat)
    if name == "fp32":
        return np.zeros_like(flat)
    if name == "fp16":
        return magnitude * 2.0**-11 + 2.0**-25
    if name == "int8":
        chunks = -(-len(flat) // INT8_CHUNK)
        padded = np.zeros(chunks * INT8_CHUNK, np.float32)
        padded[:len(flat)] = magnitude
        per_chunk = padded.reshape(chunks, INT8_CHUNK).max(axis=1) / 254 * (1 + 1e-5) + 1e-30
        return np.repeat(per_chunk, INT8_CHUNK)[:len(flat)]
    if name == "sign":
        # the decoded value has the original's sign (zero counts as positive) and the chunk's mean magnitude
        chunks = -(-len(flat) // SIGN_CHUNK)
        means = np.array([magnitude[i * SIGN_CHUNK:(i + 1) * SIGN_CHUNK].astype(np.float64).mean() for i in range(chunks)])
        scale = np.repeat(means, SIGN_CHUNK)[:len(flat)]
        return np.abs(magnitude - scale) * (1 + 1e-5) + scale * 1e-6 + 1e-30
    if name == "ternary":
        # a value above 3/4 of its chunk's mean magnitude (m) decodes to +-s (s: the mean magnitude of those
        # values), any other to 0: the error is | |x| - s | or |x|. Values within rounding of m may go either
        # way, so both candidates for s (with and without them) are allowed.
        bound = np.zeros(len(flat), np.float64)
        for start in range(0, len(flat), TERNARY_CHUNK):
            chunk = magnitude[start:start + TERNARY_CHUNK].astype(np.float64)
            m = chunk.mean() * 0.75
            above, near = chunk > m * (1 + 1e-6), np.abs(chunk - m) <= m * 1e-6
            candidates = [chunk[above].mean()] if above.any() else []
            candidates += [chunk[above | near].mean()] if near.any() else []
            sent_error = np.max([np.abs(chunk - c) for c in candidates], axis=0) if candidates else chunk * 0
            bound[start:start + TERNARY_CHUNK] = (np.where(above, sent_error, np.where(near, np.maximum(chunk, sent_error), chunk))
                                                  * (1 + 1e-5) + chunk.max() * 1e-6 + 1e-30)
        return bound
    # top-k: a dropped value is at most the k-th largest magnitude in its chunk; a kept one is exact or
    # quantized (fp16 relative, int8 by the chunk's largest kept magnitude / 254).
    codec = get_codec(name)
    bound = np.zeros_like(flat, dtype=np.float64)
    for start in range(0, len(flat), TOPK_CHUNK):
        chunk = magnitude[start:start + TOPK_CHUNK]
        k = kept_per_chunk(len(chunk), codec.density)
        threshold = np.sort(chunk)[::-1][k - 1]
        kept_error = {"fp32": 0.0, "fp16": threshold * 0 + 2.0**-11 * chunk.max() + 2.0**-25,
                      "int8": chunk.max() / 254 * (1 + 1e-5)}[codec.value_format]
        bound[start:start + TOPK_CHUNK] = max(threshold, kept_error) + 1e-30
    return bound


@pytest.mark.parametrize("name", sorted(CODEC_REGISTRY))
@settings(max_examples=40, deadline=None)
@given(flat=arrays)
def test_round_trip_stays_within_the_codec_error_bound(name, flat):
    codec = get_codec(name)
    update = as_update(flat)
    data = codec.encode(update)
    decoded = codec.decode(data)
    assert set(decoded) == set(update)
    assert all(decoded[n].shape == update[n].shape and decoded[n].dtype == torch.float32 for n in update)
    original = flatten(update)
    error = np.abs(flatten(decoded).astype(np.float64) - original.astype(np.float64))
    assert (error <= error_bound(name, original)).all()
    assert codec.encode(update) == data  # deterministic
    assert codec.encode(decoded) == codec.encode(codec.decode(codec.encode(decoded)))


@pytest.mark.parametrize("name", sorted(CODEC_REGISTRY))
def test_truncated_or_foreign_bytes_are_refused(name):
    codec = get_codec(name)
    data = codec.encode({"w": torch.arange(100, dtype=torch.float32)})
    for broken in (data[:-1], data + b"\x00", b"XXXX" + data[4:]):
        with pytest.raises(CodecError):
            codec.decode(broken)
    other = next(c for n, c in CODEC_REGISTRY.items() if n != name)
    with pytest.raises(CodecError, match="encoded with"):
        other.decode(data)


def test_non_finite_values_are_refused():
    with pytest.raises(CodecError):
        get_codec("int8").encode({"w": torch.tensor([1.0, float("nan")])})


def test_unknown_codec_names_fail_clearly():
    with pytest.raises(CodecError, match="unknown codec"):
        get_codec("zip")


@settings(max_examples=60, deadline=None)
@given(values=hnp.arrays(np.float32, st.integers(1, 200), elements=st.sampled_from([0.0, 1.0, -1.0, 2.0, -3.0])),
       k=st.integers(1, 200))
def test_top_selection_is_largest_magnitudes_with_ties_to_the_lower_index(values, k):
    k = min(k, len(values))
    chosen = select_top(values, k)
    expected = sorted(sorted(range(len(values)), key=lambda i: (-abs(float(values[i])), i))[:k])
    assert chosen.tolist() == expected


def test_top_k_indices_are_chunk_local_16_bit():
    codec = get_codec("topk")
    flat = np.zeros(3 * TOPK_CHUNK + 5, dtype=np.float32)
    flat[TOPK_CHUNK * 2 + 65535] = 9.0  # last position of chunk 2: needs all 16 bits, no more
    decoded = codec.decode(codec.encode({"w": torch.from_numpy(flat)}))["w"].numpy()
    assert decoded[TOPK_CHUNK * 2 + 65535] == 9.0
    kept = sum(kept_per_chunk(min(TOPK_CHUNK, len(flat) - s), codec.density) for s in range(0, len(flat), TOPK_CHUNK))
    header = len(codec.encode({"w": torch.zeros(0)}))  # same framing: one tensor of one dimension
    assert len(codec.encode({"w": torch.from_numpy(flat)})) == header + kept * (2 + 4)  # u16 index + fp32 value


def test_error_feedback_eventually_sends_everything():
    codec = get_codec("topk-int8")
    feedback = ErrorFeedback(codec)
    generator = torch.Generator().manual_seed(3)
    # magnitudes in [0.5, 1.5): each coordinate's residual reaches the top-k threshold within a few hundred rounds
    update = {"w": (torch.rand(4096, generator=generator) + 0.5) * torch.randn(4096, generator=generator).sign()}
    sent_total = torch.zeros(4096)
    rounds = 400
    for _ in range(rounds):
        _, sent = feedback.encode(update)
        sent_total += sent["w"]
    # nothing is dropped for good: every coordinate went out, and sent + residual is what was computed
    assert bool((sent_total != 0).all())
    assert torch.allclose(sent_total + feedback.residual["w"], update["w"] * rounds, rtol=1e-4, atol=1e-2)
    # the residual stays bounded (about 1/density rounds of the largest value), it does not grow with rounds
    assert float(feedback.residual["w"].abs().max()) < 2 * float(update["w"].abs().max()) / float(codec.density)


@pytest.mark.parametrize("name", ["sign", "ternary", "topk-int8"])
def test_error_feedback_in_place_gives_the_same_bytes_and_residual(name):
    """`consume`, `residual_into` and `load_state(copy=False)` only change where the arithmetic writes."""
    from trolly.compute.canonical import decode_tensors
    from trolly.compute.canonical_copy import allocate_canonical
    generator = torch.Generator().manual_seed(5)
    updates = [{"b": torch.randn(3000, generator=generator), "a": torch.randn(40, 70, generator=generator)}
               for _ in range(3)]
    plain, in_place = ErrorFeedback(get_codec(name)), ErrorFeedback(get_codec(name))
    for update in updates:
        expected, expected_sent = plain.encode(update)
        residual_bytes, residual = allocate_canonical(update)
        owned = {key: tensor.clone() for key, tensor in update.items()}
        previous = in_place.residual
        in_place.load_state(previous, copy=False)
        data, sent = in_place.encode(owned, consume=True, residual_into=residual)
        assert data == expected
        assert all(torch.equal(sent[key], expected_sent[key]) for key in update)
        stored = decode_tensors(bytes(residual_bytes))  # the residual is its canonical bytes
        assert all(plain.residual[key].numpy().tobytes() == stored[key].numpy().tobytes() for key in update)
        assert all(in_place.residual[key] is residual[key] for key in update)
    untouched = {key: tensor.clone() for key, tensor in updates[0].items()}
    in_place.encode(untouched)  # without `consume` the caller's tensors are left alone
    assert all(torch.equal(untouched[key], updates[0][key]) for key in untouched)


@settings(max_examples=40, deadline=None)
@given(flat=hnp.arrays(np.float32, st.integers(1, 5 * SIGN_CHUNK + 7), elements=finite))
def test_sign_scales_are_the_float64_tree_sums_of_each_padded_chunk(flat):
    """The chunk means against a plain reference: the whole padded vector in float64, summed pairwise."""
    chunks = -(-len(flat) // SIGN_CHUNK)
    rows = np.zeros(chunks * SIGN_CHUNK, np.float64)
    rows[:len(flat)] = np.abs(flat)
    rows = rows.reshape(chunks, SIGN_CHUNK)
    while rows.shape[1] > 1:
        rows = rows[:, 0::2] + rows[:, 1::2]
    lengths = np.minimum(SIGN_CHUNK, len(flat) - SIGN_CHUNK * np.arange(chunks)).astype(np.float64)
    scales, negative = get_codec("sign")._scales_and_signs(flat)
    assert scales.tobytes() == (rows[:, 0] / lengths).astype(np.float32).tobytes()
    assert (negative == (flat < 0)).all()


def test_compression_ratios_match_the_registry_description():
    update = {"w": torch.randn(1024 * 1024, generator=torch.Generator().manual_seed(0))}
    dense = len(get_codec("fp32").encode(update))
    sizes = {name: len(get_codec(name).encode(update)) for name in CODEC_REGISTRY}
    assert sizes["fp16"] < dense / 1.99
    assert sizes["int8"] < dense / 3.9
    assert dense / sizes["topk-int8"] > 60
    assert dense / sizes["topk-int8-sparse"] > 250
    assert dense / sizes["sign"] > 31
    assert 19.5 < dense / sizes["ternary"] < 21  # about 1.58 bits a value for normal values


def test_sign_keeps_signs_and_chunk_mean_magnitudes():
    values = torch.tensor([3.0, -1.0, 0.0, -2.0])
    decoded = get_codec("sign").decode(get_codec("sign").encode({"w": values}))["w"]
    assert decoded.tolist() == [1.5, -1.5, 1.5, -1.5]


@pytest.mark.parametrize("name", sorted(CODEC_REGISTRY))
@settings(max_examples=30, deadline=None)
@given(flat=arrays)
def test_encode_and_decode_is_decode_of_encode_bit_for_bit(name, flat):
    codec = get_codec(name)
    update = as_update(flat)
    data, decoded = codec.encode_and_decode(update)
    assert data == codec.encode(update)
    reference = codec.decode(data)
    assert set(decoded) == set(reference)
    for tensor_name, tensor in reference.items():
        assert decoded[tensor_name].dtype == tensor.dtype and decoded[tensor_name].shape == tensor.shape
        assert decoded[tensor_name].numpy().tobytes() == tensor.numpy().tobytes()


def test_ternary_sends_values_above_three_quarters_of_the_chunk_mean_magnitude_at_their_mean():
    values = torch.tensor([3.0, -1.0, 0.0, -2.0, 0.5, -4.0])  # mean magnitude 1.75, t = 1.3125: 3, -2, -4 sent
    codec = get_codec("ternary")
    data = codec.encode({"w": values})
    assert codec.decode(data)["w"].tolist() == [3.0, 0.0, 0.0, -3.0, 0.0, -3.0]
    header = len(codec.encode({"w": torch.zeros(0)}))
    # one scale, the sent bitmap 0b101001, and the signs of the three sent values 0b110
    assert data[header:] == np.float32(3.0).tobytes() + bytes([0b101001, 0b110])


def test_ternary_refuses_stray_bits_and_missing_signs():
    codec = get_codec("ternary")
    data = codec.encode({"w": torch.tensor([3.0, -1.0, 0.0, -2.0, 0.5, -4.0])})
    with pytest.raises(CodecError):
        codec.decode(data[:-2] + bytes([0b11101001]) + data[-1:])  # a bit for a seventh value
    with pytest.raises(CodecError):
        codec.decode(data[:-1] + bytes([0b1110]))  # a fourth sign bit
    with pytest.raises(CodecError):
        codec.decode(data[:-1])  # no signs


def test_error_feedback_with_ternary_sends_every_value_eventually():
    """Values below the threshold wait in the residual; they are not dropped for good, and the residual stays
    smaller than the sign codec's under the same updates (a constant update grows both, sign's faster)."""
    generator = torch.Generator().manual_seed(4)
    update = {"w": torch.randn(4096, generator=generator)}
    feedbacks = {name: ErrorFeedback(get_codec(name)) for name in ("ternary", "sign")}
    sent_total = torch.zeros(4096)
    rounds = 200
    for _ in range(rounds):
        _, sent = feedbacks["ternary"].encode(update)
        sent_total += sent["w"]
        feedbacks["sign"].encode(update)
    residual = feedbacks["ternary"].residual["w"]
    assert torch.allclose(sent_total + residual, update["w"] * rounds, rtol=1e-4, atol=1e-2)
    assert float(residual.norm()) < 0.7 * float(feedbacks["sign"].residual["w"].norm())
