"""Fast paths inside `chain/` held to their readable references."""

import bech32
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trolly.chain.bech32_fast import bech32_encode_bytes
from trolly.chain.crypto import PrivateKey, decode_address, encode_address, encode_address_reference
from trolly.chain.crypto import verify_signature, verify_signature_reference
from trolly.chain.errors import InvalidAddress
from trolly.chain.signature_cache import VerifiedSignatures


@given(st.binary(min_size=20, max_size=20))
def test_encode_address_equals_the_reference_and_decodes_back(address):
    assert encode_address(address) == encode_address_reference(address)
    assert decode_address(encode_address(address)) == address


@given(hrp=st.sampled_from(["trolly", "bc", "a", "cosmosvaloper"]), data=st.binary(max_size=40))
def test_bech32_encode_bytes_equals_the_bech32_package_for_any_length(hrp, data):
    assert bech32_encode_bytes(hrp, data) == bech32.bech32_encode(hrp, bech32.convertbits(data, 8, 5))


@pytest.mark.parametrize("length", [0, 19, 21, 32])
def test_encode_address_still_rejects_wrong_lengths(length):
    with pytest.raises(InvalidAddress):
        encode_address(bytes(length))


def signed(seed: int, message: bytes) -> tuple[bytes, bytes]:
    key = PrivateKey(bytes([seed]) * 32)
    return key.pubkey, key.sign(message)


@given(seed=st.integers(1, 255), message=st.binary(max_size=64), flip=st.integers(0, 127), twice=st.booleans())
def test_verify_signature_answers_as_the_reference_before_and_after_remembering(seed, message, flip, twice):
    pubkey, signature = signed(seed, message)
    bad_signature = signature[:flip % 64] + bytes([signature[flip % 64] ^ 1]) + signature[flip % 64 + 1:]
    cases = [(pubkey, message, signature), (pubkey, message + b"x", signature), (pubkey, message, bad_signature),
             (signed(seed % 255 + 1, b"")[0], message, signature), (pubkey[:31], message, signature)]
    for _ in range(2 if twice else 1):
        for case in cases:
            assert verify_signature(*case) == verify_signature_reference(*case)


def test_only_successes_are_remembered_and_the_memo_is_bounded():
    checks = []

    def counting_check(pubkey, message, signature):
        checks.append(message)
        return verify_signature_reference(pubkey, message, signature)

    memo = VerifiedSignatures(counting_check, capacity=3)
    pubkey, signature = signed(7, b"hello")
    assert memo.verify(pubkey, b"hello", signature) and memo.verify(pubkey, b"hello", signature)
    assert checks == [b"hello"]  # the second answer came from the memo
    assert not memo.verify(pubkey, b"hellO", signature) and not memo.verify(pubkey, b"hellO", signature)
    assert checks == [b"hello", b"hellO", b"hellO"] and len(memo) == 1  # failures are checked every time
    for i in range(5):
        other_key, other_signature = signed(10 + i, b"m")
        assert memo.verify(other_key, b"m", other_signature)
    assert len(memo) == 3
    assert memo.verify(pubkey, b"hello", signature) and checks.count(b"hello") == 2  # evicted, checked again


@pytest.mark.parametrize("which", ["pubkey", "signature"])
def test_a_bytearray_argument_gets_the_references_answer(which):
    pubkey, signature = signed(3, b"abc")
    arguments = {"pubkey": pubkey, "message": b"abc", "signature": signature}
    arguments[which] = bytearray(arguments[which])
    with pytest.raises(TypeError):  # PyNaCl wants bytes; the memo changes nothing about that
        verify_signature_reference(**arguments)
    with pytest.raises(TypeError):
        verify_signature(**arguments)
