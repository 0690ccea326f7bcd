"""Fast paths inside `chain/` held to their readable references."""

import bech32
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trolly.chain.bech32_fast import bech32_encode_bytes
from trolly.chain.crypto import PrivateKey, decode_address, encode_address, encode_address_reference
from trolly.chain.crypto import verify_signature
from trolly.chain.errors import InvalidAddress


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


@pytest.mark.parametrize("which", ["pubkey", "signature"])
def test_verify_signature_refuses_a_bytearray_as_pynacl_does(which):
    pubkey, signature = signed(3, b"abc")
    arguments = {"pubkey": pubkey, "message": b"abc", "signature": signature}
    assert verify_signature(**arguments)
    arguments[which] = bytearray(arguments[which])
    with pytest.raises(TypeError):
        verify_signature(**arguments)
