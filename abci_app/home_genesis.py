"""CometBFT v0.38 genesis documents for Trolly: the format, the times, and the dev/localnet presets.

A genesis.json holds CometBFT's fields (genesis_time, chain_id, initial_height, consensus_params,
validators, app_hash) and Trolly's `app_state` (params, funded accounts with the public keys known for them,
validators bonded from their operators' balances; see the bank and staking modules). 64-bit integers are JSON
strings, keys `{"type", "value"}`, times RFC 3339 with nanoseconds, as CometBFT writes them. Re-exported by
`trolly.abci_app.home`.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import time
from dataclasses import dataclass

from trolly.chain.crypto import address_from_pubkey, encode_address
from trolly.chain.hd import dev_key
from trolly.chain.market.params import MarketParams, longest_reveal_wait

from .cometbft import COMETBFT_VERSION  # noqa: F401  (re-exported: config.toml and /status name it)
from .errors import AbciAppError


DEFAULT_POWER_REDUCTION = 1_000_000
"""utrl per unit of consensus power (the staking module's default `power_reduction`)."""

DEFAULT_DEV_BALANCE = 1_000_000_000_000
"""What the dev account holds in a dev genesis: 1,000,000 TRL, in utrl."""

DEFAULT_VALIDATOR_STAKE = 10_000_000
"""Self-bond of a dev/localnet genesis validator: 10 TRL, power 10."""

DEV_UNBONDING_BLOCKS = longest_reveal_wait(MarketParams()) + 1
"""Unbonding of a dev genesis (whose market takes the chain defaults): the fewest blocks init_chain accepts, so
that a developer sees unbonding complete soon, yet a lazy verifier that unbonds after its vote is still
penalised at its round's reveal deadline."""

PUBKEY_TYPE = "tendermint/PubKeyEd25519"
PRIVKEY_TYPE = "tendermint/PrivKeyEd25519"


class HomeError(AbciAppError):
    """A home directory or genesis is missing, incomplete, malformed, or would be overwritten."""



def format_time(time_ns: int) -> str:
    """RFC 3339 with nanoseconds and trailing zeros trimmed, in UTC, as Go's `time.RFC3339Nano` prints it."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        stamp += "." + f"{nanos:09d}".rstrip("0")
    return stamp + "Z"


def parse_time(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp (any fraction length, `Z` or offset)."""
    body, fraction, offset = text, "", "Z"
    if text.endswith("Z"):
        body = text[:-1]
    elif len(text) > 6 and text[-6] in "+-" and text[-3] == ":":
        body, offset = text[:-6], text[-6:]
    if "." in body:
        body, fraction = body.split(".", 1)
    try:
        moment = datetime.datetime.strptime(body, "%Y-%m-%dT%H:%M:%S")
        if offset == "Z":
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        else:
            moment = datetime.datetime.fromisoformat(body + offset)
        if fraction and (not fraction.isdigit() or len(fraction) > 9):
            raise ValueError(f"bad fraction {fraction!r}")
    except ValueError as exc:
        raise HomeError(f"invalid RFC 3339 time {text!r}: {exc}") from None
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return int(moment.timestamp()) * 1_000_000_000 + nanos


def default_consensus_params() -> dict:
    """CometBFT v0.38's default consensus params, in genesis JSON form (64-bit integers as strings)."""
    return {
        "block": {"max_bytes": "22020096", "max_gas": "-1"},
        "evidence": {"max_age_num_blocks": "100000", "max_age_duration": "172800000000000", "max_bytes": "1048576"},
        "validator": {"pub_key_types": ["ed25519"]},
        "version": {"app": "0"},
        # Vote extensions from the first block: their signatures seed the market's sampling (abci_app/seed.py).
        "abci": {"vote_extensions_enable_height": "1"},
    }


@dataclass(frozen=True)
class GenesisValidator:
    """A validator both in CometBFT's `validators` list and in the app's staking genesis."""

    pubkey: bytes
    operator: str  # trolly1... account that bonds `stake` from its genesis balance
    stake: int
    moniker: str

    @property
    def power(self) -> int:
        return self.stake // DEFAULT_POWER_REDUCTION


def build_app_state(
    accounts: dict[str, int] | None = None,
    validators: list[GenesisValidator] | tuple[GenesisValidator, ...] = (),
    params: dict | None = None,
    public_keys: list[bytes] | tuple[bytes, ...] = (),
) -> dict:
    """The `app_state` object: params, funded accounts, and validators bonded from their operators' balances.

    Each of `public_keys` (ed25519) is recorded in its account (`pub_key`, base64; an account not in `accounts`
    is listed with balance 0), so data can be sealed to it before it signs anything: a private task's data key
    reaches a validator's operator once it is drawn to check the task (docs/privacy.md)."""
    if params is None:  # fees: the defaults
        params = {"staking": {"unbonding_blocks": DEV_UNBONDING_BLOCKS}}
    entries = {address: {"address": address, "balance": str(balance)} for address, balance in (accounts or {}).items()}
    for pub_key in public_keys:
        address = encode_address(address_from_pubkey(pub_key))
        entry = entries.setdefault(address, {"address": address, "balance": "0"})
        entry["pub_key"] = base64.b64encode(pub_key).decode()
    return {
        "params": params,
        "accounts": list(entries.values()),
        "validators": [
            {
                "operator": v.operator,
                "pub_key": base64.b64encode(v.pubkey).decode(),
                "stake": str(v.stake),
                "moniker": v.moniker,
            }
            for v in validators
        ],
    }


def build_genesis(
    chain_id: str,
    app_state: dict,
    validators: list[GenesisValidator] | tuple[GenesisValidator, ...] = (),
    genesis_time_ns: int | None = None,
    initial_height: int = 1,
) -> dict:
    """A CometBFT v0.38 genesis document whose `validators` agree with the app's staking genesis.

    Its consensus params enable vote extensions from the first block, so its market samples only from their
    seed (`seed_from_extensions` = 1, see `with_extension_seeds`), on CometBFT and on the solo engine alike."""
    check_chain_id(chain_id)
    if genesis_time_ns is None:
        genesis_time_ns = time.time_ns()
    consensus_params = default_consensus_params()
    return {
        "genesis_time": format_time(genesis_time_ns),
        "chain_id": chain_id,
        "initial_height": str(initial_height),
        "consensus_params": consensus_params,
        "validators": [
            {
                "address": hashlib.sha256(v.pubkey).digest()[:20].hex().upper(),
                "pub_key": {"type": PUBKEY_TYPE, "value": base64.b64encode(v.pubkey).decode()},
                "power": str(v.power),
                "name": v.moniker,
            }
            for v in validators
        ],
        "app_hash": "",
        "app_state": with_extension_seeds(app_state, consensus_params),
    }


def with_extension_seeds(app_state: dict, consensus_params: dict) -> dict:
    """`app_state` with the market's `seed_from_extensions` = 1 when `consensus_params` enable vote extensions:
    a block without their seed then defers sampling instead of falling back to the block hash its proposer
    built (and could grind). The chain's own default stays 0, for state-machine tests that make blocks without
    an engine."""
    if not int(consensus_params.get("abci", {}).get("vote_extensions_enable_height", "0")):
        return app_state
    params = dict(app_state.get("params") or {})
    params["market"] = {**params.get("market", {}), "seed_from_extensions": 1}
    return {**app_state, "params": params}


def dev_genesis(chain_id: str, validator_pubkeys: list[bytes], genesis_time_ns: int | None = None) -> dict:
    """The `trolly-node dev` genesis: `dev_key(0)` funded and operating the (single) validator.

    The same as `localnet_genesis`, whose validator 0 is operated by `dev_key(0)`.
    """
    return localnet_genesis(chain_id, validator_pubkeys, genesis_time_ns)


def localnet_genesis(chain_id: str, validator_pubkeys: list[bytes], genesis_time_ns: int | None = None) -> dict:
    """Genesis for N validators: `dev_key(i)` funded and operating validator i, with `dev_key(0)` funded too;
    each operator's public key is in its account."""
    accounts: dict[str, int] = {}
    validators = []
    operator_keys = [dev_key(index).pubkey for index in range(max(len(validator_pubkeys), 1))]
    for index, pubkey in enumerate(validator_pubkeys):
        operator = encode_address(dev_key(index).address)
        accounts[operator] = DEFAULT_DEV_BALANCE
        validators.append(GenesisValidator(pubkey, operator, DEFAULT_VALIDATOR_STAKE, f"validator-{index}"))
    accounts.setdefault(encode_address(dev_key(0).address), DEFAULT_DEV_BALANCE)
    app_state = build_app_state(accounts, validators, public_keys=operator_keys)
    return build_genesis(chain_id, app_state, validators, genesis_time_ns)


def check_chain_id(chain_id: str) -> None:
    """CometBFT limits chain ids to 50 characters; we also refuse whitespace and empty ids."""
    if not chain_id or len(chain_id) > 50 or any(c.isspace() for c in chain_id):
        raise HomeError(f"invalid chain id {chain_id!r}: 1..50 characters, no whitespace")
