"""The console's chain reads prove what they show: against a node that answers a tampered value with a valid
proof of the true record, a read fails with the wallet's ProofInvalid (the server answers 502 with the reason)
instead of showing the lie."""

from __future__ import annotations

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.console import chain_reads
from trolly.wallet.errors import ProofInvalid
from trolly.wallet.rpc import RpcClient
from wallet_helpers import DEV_BALANCE, fake_node  # noqa: F401  (fixture)

DEV_ADDRESS = encode_address(dev_key(0).address)


def test_an_address_search_shows_proven_answers(fake_node):
    with RpcClient(fake_node.url) as client:
        found = client.run(chain_reads.search(client.async_client, DEV_ADDRESS))
    assert found["account"]["balance"] == DEV_BALANCE and found["account"]["proof"]["verified"]
    assert found["validator"]["proof"]["note"].startswith("proved at height ")


def test_a_tampered_balance_or_validator_power_fails_the_read(fake_node):
    """Attack: the node inflates a balance and a validator's power in its JSON answers, keeping the true proofs."""
    def inflate(path, answer):
        if path.startswith("/account/"):
            return {**answer, "balance": answer["balance"] * 2}
        if path.startswith("/validator/"):
            return {**answer, "power": answer["power"] + 1}
        return answer

    fake_node.tamper_answer = inflate
    with RpcClient(fake_node.url) as client:
        with pytest.raises(ProofInvalid, match="balance differ from the proven record"):
            client.run(chain_reads.search(client.async_client, DEV_ADDRESS))
        with pytest.raises(ProofInvalid, match="power differ from the proven record"):
            client.run(chain_reads.network_overview(client.async_client, chain_reads.ReadCache()))
