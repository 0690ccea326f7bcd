"""Checking an account query against the chain's app hash, instead of trusting the node's word.

A query at height H answers from the state after block H. That state's Merkle root (the app hash) is only
written into the header of the NEXT block, H + 1 (CometBFT headers carry the app hash of the previous
block's result). So `prove_account` asks for `/account/<address>` with `prove=true`, waits for block H + 1,
takes `header.app_hash`, and checks the `trolly:smt` proof with `trolly.chain.sparse_merkle.verify_proof`:

- key   = `trolly.chain.keys.account_key(address)` (the state key of the account);
- value = `trolly.chain.accounts.encode_account(balance, nonce, pub_key)` rebuilt from the JSON answer, so
  the numbers and key shown are the ones proven; an empty account (no balance, nonce or key) is not stored,
  so it is proven absent instead.

What this does not do: check the header's commit signatures (that is a light client's job). Against a single
node it shows that the answer is consistent with the app hash that node put in its chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from trolly.chain.accounts import Account, encode_account
from trolly.chain.keys import account_key
from trolly.chain.sparse_merkle import PROOF_OP_TYPE, verify_proof

from .errors import ProofInvalid, QueryFailed
from .rpc import AsyncRpcClient
from .sender import AccountState
from .txbuilder import parse_address


@dataclass(frozen=True)
class ProvenAccount:
    account: AccountState
    height: int
    """The state the answer comes from: after block `height`."""
    header_height: int
    """The block whose header's app hash the proof was checked against (`height + 1`)."""
    app_hash: bytes

    def to_json(self) -> dict:
        return {
            **self.account.to_json(),
            "proof": {
                "verified": True,
                "query_height": self.height,
                "header_height": self.header_height,
                "app_hash": self.app_hash.hex().upper(),
            },
        }


def account_proof_holds(app_hash: bytes, address: str, balance: int, nonce: int, proof: bytes,
                        pub_key: bytes | None = None) -> bool:
    """True when `proof` shows that, under `app_hash`, the account holds exactly (balance, nonce, pub_key)."""
    state_key = account_key(parse_address(address))
    stored = Account(balance, nonce, pub_key or b"")
    proven_value = None if stored == Account() else encode_account(stored)
    return verify_proof(app_hash, state_key, proven_value, proof)


async def prove_account(client: AsyncRpcClient, address: str, timeout: float = 30.0) -> ProvenAccount:
    """The account's balance and nonce, checked against the next block's app hash; ProofInvalid if not."""
    state_key = account_key(parse_address(address))
    result = await client.abci_query(f"/account/{address}", prove=True)
    if result.code != 0:
        raise QueryFailed(result.path, result.code, result.codespace, result.log)
    value = result.json()
    account = AccountState.from_json(value)
    if result.height <= 0:
        raise ProofInvalid("the node did not say which height its answer comes from; cannot check a proof")
    operations = [op for op in result.proof_ops if op.type == PROOF_OP_TYPE]
    if len(operations) != 1:
        raise ProofInvalid(f"expected one {PROOF_OP_TYPE} proof operation, the node sent {len(result.proof_ops)}")
    operation = operations[0]
    if operation.key and operation.key != state_key:
        raise ProofInvalid("the proof is for a different state key than this account's")
    await client.wait_for_height(result.height + 1, timeout)
    header = await client.block(result.height + 1)
    if not account_proof_holds(header.app_hash, address, account.balance, account.nonce, operation.data,
                               account.pub_key):
        raise ProofInvalid(
            f"proof of {address} at height {result.height} does NOT match the app hash "
            f"{header.app_hash.hex().upper()} of block {header.height}"
        )
    return ProvenAccount(account, result.height, header.height, header.app_hash)
