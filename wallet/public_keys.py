"""An account's ed25519 public key, read from the chain's account record: what a key is sealed to.

The chain records an account's public key the first time it signs a transaction (the ante handler), and
genesis records the keys of accounts that may never sign one (the validators' operators of a localnet or a
`trolly-node init` home; `accounts[i].pub_key`). So one query answers it: `/account/<address>`. The key is
checked against the address here, so a node that answers a wrong key gets nothing sealed to it. A requester
seals its data key to each member of a private task and to each validator's operator drawn to check it this
way (docs/privacy.md).
"""

from __future__ import annotations

from trolly.chain.crypto import address_from_pubkey, decode_address

from .errors import WalletError
from .rpc import AsyncRpcClient
from .sender import fetch_account


async def find_public_key(client: AsyncRpcClient, address: str) -> bytes | None:
    """The ed25519 public key the chain holds for `address`, None while it holds none."""
    pub_key = (await fetch_account(client, address)).pub_key
    if pub_key is not None and address_from_pubkey(pub_key) != decode_address(address):
        raise WalletError(f"the node answered a public key for {address} that is not that account's key")
    return pub_key
