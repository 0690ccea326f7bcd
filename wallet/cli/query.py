"""`trolly-wallet query ...`: accounts, validators, one validator and its signing info, delegations, unbonding,
rewards, params (each answer proven against the app hash, `proved at height H`), transactions, node status."""

from __future__ import annotations

import click

from ..errors import WalletError
from ..proofs import prove_answer
from ..proven_views import (prove_delegations, prove_params, prove_rewards, prove_signing_info, prove_unbonding,
                            prove_validator, prove_validators)
from ..rpc import hash_hex
from ..txbuilder import describe_tx
from ..command_line.errors import WalletGroup
from ..command_line.options import keyring_options, node_options, output_option, settings
from ..command_line.output import amount_text, emit, print_key_values, print_proof, print_table, proof_text
from .gov import QUERY_COMMANDS as GOV_QUERY_COMMANDS
from .transactions import lookup_address


@click.group(cls=WalletGroup)
def query() -> None:
    """Read chain state through the node."""


for _command in GOV_QUERY_COMMANDS:
    query.add_command(_command)


def address_of(text: str) -> str:
    """An address given directly, or the address of a named key in this home (any keyring backend)."""
    return lookup_address(text)


@query.command("account")
@click.argument("address_or_name")
@click.option("--prove", is_flag=True, hidden=True, help="Kept for old scripts: every answer is proven.")
@keyring_options
@node_options
@output_option
def account(address_or_name: str, prove: bool) -> None:
    """Balance, nonce and public key of ADDRESS_OR_NAME (an address, or a key name in this keyring); the key is
    `-` until the account signs a transaction (or genesis names it). The answer's ICS23 proof is checked
    against the app hash in the next block's header (exit 11 if it does not hold)."""
    options = settings()
    address = address_of(address_or_name)
    client = options.client()
    proven = client.run(prove_answer(client.async_client, f"/account/{address}"))
    result = {**proven.answer, "proof": proven.proof_json()}

    def render(data: dict) -> None:
        print_key_values([("address", data["address"]), ("balance", amount_text(data["balance"])),
                          ("nonce", data["nonce"]), ("public key", data["pub_key"] or "-"),
                          ("proof", proof_text(data["proof"]))])

    emit(result, options.json, render)


@query.command("validators")
@click.option("--consensus", is_flag=True, help="Show CometBFT's current validator set instead of the staking module's.")
@node_options
@output_option
def validators(consensus: bool) -> None:
    """Validators with their operator, stake and power (or, with --consensus, CometBFT's set). The staking
    module's listing is proven complete against the next block's app hash (exit 11 if it does not hold)."""
    options = settings()
    client = options.client()
    if consensus:
        found = [validator.to_json() for validator in client.validators()]
        emit(found, options.json, lambda data: print_table(
            ["address", "pubkey", "voting power"],
            [[v["address"], v["pubkey"], v["voting_power"]] for v in data],
            empty="No validators."))
        return
    listed, proven = client.run(prove_validators(client.async_client))
    proof = proven.proof_json()
    found = [{**validator.to_answer(), "proof": proof} for validator in listed]

    def render(data: list) -> None:
        print_table(["moniker", "operator", "stake", "power", "jailed"],
                    [[v["moniker"], v["operator"], amount_text(v["stake"]), v["power"], "yes" if v["jailed"] else "no"]
                     for v in data], empty="No validators.")
        print_proof(proof)

    emit(found, options.json, render)


@query.command("tx")
@click.argument("tx_hash")
@node_options
@output_option
def transaction(tx_hash: str) -> None:
    """The transaction TX_HASH (hex) as included in a block: height, code, log, events, body."""
    options = settings()
    try:
        normalized = hash_hex(tx_hash)
    except ValueError:
        raise WalletError(f"invalid transaction hash {tx_hash!r}: expected hex") from None
    found = options.client().find_tx(normalized)
    if found is None:
        raise WalletError(f"transaction {normalized} not found (not in a block yet, or never sent)")
    result = found.to_json()
    result["tx"] = describe_tx(found.tx) if found.tx else None

    def render(data: dict) -> None:
        rows = [("hash", data["hash"]), ("height", data["height"]), ("code", data["code"]), ("log", data["log"] or "-")]
        if data["tx"]:
            rows += [("signer", data["tx"]["signer"]), ("nonce", data["tx"]["nonce"]), ("fee", amount_text(data["tx"]["fee"]))]
            rows += [(f"message {i}", f"{m['type']} {m['fields']}") for i, m in enumerate(data["tx"]["messages"], 1)]
        for event in data["events"]:
            rows.append((f"event {event['type']}", ", ".join(f"{a['key']}={a['value']}" for a in event["attributes"])))
        print_key_values(rows)

    emit(result, options.json, render)


@query.command("status")
@node_options
@output_option
def status() -> None:
    """The node's chain id, latest height, block hash, app hash and time."""
    options = settings()
    result = options.client().status().to_json()
    result["node"] = options.client().url
    emit(result, options.json, lambda data: print_key_values([(k.replace("_", " "), v) for k, v in data.items()]))


@query.command("params")
@node_options
@output_option
def params() -> None:
    """The chain's parameters, by module section, proven against the next block's app hash (exit 11 if not)."""
    options = settings()
    client = options.client()
    sections, proven = client.run(prove_params(client.async_client))
    result = {**sections, "proof": proven.proof_json()}
    emit(result, options.json, lambda _: print_key_values(
        [(f"{section}.{name}", value) for section, values in sorted(sections.items())
         for name, value in sorted(values.items())] + [("proof", proof_text(result["proof"]))]))


@query.command("unbonding")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def unbonding(address_or_name: str) -> None:
    """Stake ADDRESS_OR_NAME undelegated (its own validator's included), and the height each part comes back;
    proven against the next block's app hash (exit 11 if not)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_unbonding(client.async_client, address_of(address_or_name)))
    result = {**view.to_answer(), "proof": proven.proof_json()}

    def render(data: dict) -> None:
        print_table(["validator", "amount", "unbonded at height", "returns at height"],
                    [[e["validator"], amount_text(e["amount"]), e["creation_height"], e["maturity_height"]]
                     for e in data["entries"]], empty=f"Nothing unbonding for {data['delegator']}.")
        print_proof(data["proof"])

    emit(result, options.json, render)


@query.command("validator")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def validator(address_or_name: str) -> None:
    """One validator: stake, power, self-bond, delegators, commission terms, jail state. The ICS23 proof of every
    key the answer reads is checked against the next block's app hash (exit 11 if one does not hold)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_validator(client.async_client, address_of(address_or_name)))
    result = {**view.to_answer(), "proof": proven.proof_json()}
    emit(result, options.json, lambda data: print_key_values([
        ("moniker", data["moniker"]), ("operator", data["operator"]), ("stake", amount_text(data["stake"])),
        ("self-bond", amount_text(data["self_bond"])), ("delegators", data["delegators"]), ("power", data["power"]),
        ("jailed", "yes" if data["jailed"] else "no"),
        ("commission", f"{data['commission_rate'] / 100:g}% (max {data['max_rate'] / 100:g}%, "
                       f"changes by at most {data['max_change_rate'] / 100:g}% at a time)"),
        ("details", data["details"] or "-"), ("proof", proof_text(data["proof"]))]))


@query.command("delegations")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def delegations(address_or_name: str) -> None:
    """ADDRESS_OR_NAME's delegations: each validator and what the delegation is worth now; the listing proven
    complete against the next block's app hash (exit 11 if not)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_delegations(client.async_client, address_of(address_or_name)))
    result = {**view.to_answer(), "proof": proven.proof_json()}

    def render(data: dict) -> None:
        print_table(["validator", "amount", "shares"],
                    [[row["validator"], amount_text(row["amount"]), row["shares"]] for row in data["delegations"]],
                    empty=f"No delegations of {data['delegator']}.")
        print_proof(data["proof"])

    emit(result, options.json, render)


@query.command("rewards")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def rewards(address_or_name: str) -> None:
    """Fee rewards ADDRESS_OR_NAME's delegations earned and has not withdrawn, per validator; recomputed from the
    proven records against the next block's app hash (exit 11 if a proof does not hold)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_rewards(client.async_client, address_of(address_or_name)))
    result = {**view.to_answer(), "proof": proven.proof_json()}

    def render(data: dict) -> None:
        print_table(["validator", "rewards"],
                    [[row["validator"], amount_text(row["amount"])] for row in data["rewards"]],
                    empty=f"No delegations of {data['delegator']}.")
        print_proof(data["proof"])

    emit(result, options.json, render)


@query.command("signing-info")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def signing_info(address_or_name: str) -> None:
    """Liveness of the validator operated by ADDRESS_OR_NAME: commits missed in its window, whether it is jailed
    and until which height, whether it is tombstoned for double-signing. The validator's record (for its
    consensus address), the signing info and the params are proven against the next block's app hash (exit 11 if
    a proof does not hold)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_signing_info(client.async_client, address_of(address_or_name)))
    result = {**view.to_answer(), "proof": proven.proof_json()}

    def render(data: dict) -> None:
        jail = "no"
        if data["tombstoned"]:
            jail = "for good (tombstoned: double-signed)"
        elif data["jailed"]:
            jail = f"yes, unjail from height {data['jailed_until']}" if data["jailed_until"] else "yes"
        window = data["signed_blocks_window"]
        counted = min(data["index_offset"], window)
        print_key_values([
            ("operator", data["operator"]), ("consensus address", data["consensus_address"]),
            ("missed blocks", f"{data['missed_blocks_counter']} of the last {counted} counted "
                              f"(jailed past {data['max_missed_blocks']} of {window})"),
            ("window started at height", data["start_height"]), ("jailed", jail),
            ("proof", proof_text(data["proof"]))])

    emit(result, options.json, render)
