"""An account's ed25519 public key, read from a transaction it signed: what a key is sealed to.

The chain stores addresses, not public keys (an address is the first 20 bytes of sha256(pubkey)). Every
transaction carries its signer's public key and the chain tags it with a `tx.signer` event, which the node's
transaction index answers (`tx_search`); so the public key of any account that has signed one transaction is
on chain already, checked here against its address. A requester seals its data key to each member of a private
task this way (a member signed its `JoinTask`), and to each validator's operator (whose verifier has voted, or
who signed any transaction: an operator that never did has no key to seal to; docs/privacy.md).
"""

from __future__ import annotations

from trolly.chain.crypto import address_from_pubkey, decode_address
from trolly.chain.errors import ChainError
from trolly.chain.tx import decode_tx

from .rpc import AsyncRpcClient


async def find_public_key(client: AsyncRpcClient, address: str) -> bytes | None:
    """The ed25519 public key of `address` from the first transaction it signed, None when it signed none."""
    wanted = decode_address(address)
    results, _ = await client.tx_search(f"tx.signer='{address}'", per_page=1)
    for result in results:
        try:
            pubkey = decode_tx(result.tx).pubkey
        except ChainError:
            continue
        if address_from_pubkey(pubkey) == wanted:
            return pubkey
    return None
