"""What the soak checks all along, from the nodes' RPCs, in a thread of its own.

- App hash agreement: every node's headers (block hash and the app hash each header carries, the state the
  previous block left) are read as they come; a height at which two nodes hold different ones is a
  disagreement. Nodes that are down or paused are read again once they answer; a node that joined by state
  sync is read from the first block it holds.
- Supply: the chain's total supply (`/supply`, at a given height) must equal the supply first read minus
  every token burned since, as the blocks' events name them (`BURN_EVENTS`); the largest difference seen is
  the drift. Tokens are minted only at genesis, so a burn no event names, or an event naming a burn that did
  not happen, shows up here.
- Block times: the largest gap between two consecutive blocks' header times.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field

from trolly.localnet.network import Localnet
from trolly.wallet.rpc import RpcClient

from ._soak_net import PRUNED_NODE

POLL_SECONDS = 3.0
HEADERS_PER_CALL = 20
"""CometBFT's `blockchain` call answers at most 20 headers."""

BURN_EVENTS = {
    ("slash", None): ("burned_stake", "burned_unbonding"),  # downtime or double-sign: validators' stake
    ("task", "slash"): ("burned",),  # a cheater's collateral, less the verifiers' held shares
    ("task", "dropped"): ("penalty",),  # a member that missed a round
    ("task", "left"): ("forfeited",),  # a private task's key holder leaving early
    ("task", "slash_share_burned"): ("amount",),  # a lazy verifier's share of a slash
    ("task", "lazy_verifier"): ("penalty",),
    ("task", "absent_verifier"): ("penalty",),
    ("task", "losing_verdict"): ("penalty",),
    ("deposit_burned", None): ("amount",),  # a governance deposit
}
"""Every event that names tokens burned ((type, action) -> the attributes holding amounts): the chain's burns
are `accounts.burn` in modules/slashing.py, gov/store.py, market/power.py and the market's `escrow_burn`."""


def burned_in(events: list[dict]) -> int:
    """Tokens the given block events say were burned."""
    total = 0
    for event in events:
        attributes = {a["key"]: a["value"] for a in event.get("attributes") or []}
        keys = BURN_EVENTS.get((event["type"], attributes.get("action"))) or BURN_EVENTS.get((event["type"], None))
        for key in keys or ():
            total += int(attributes.get(key) or 0)
    return total


def header_seconds(time_text: str) -> float:
    """A header's RFC 3339 time (nanoseconds) as seconds since the epoch."""
    whole, _, fraction = time_text.rstrip("Z").partition(".")
    moment = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp() + float(f"0.{fraction or 0}")


@dataclass
class Observations:
    headers: dict[int, dict[int, tuple[str, str]]] = field(default_factory=dict)
    """height -> node -> (block hash, app hash in its header)."""
    block_times: dict[int, float] = field(default_factory=dict)
    """height -> header time (seconds), from the reference node."""
    supply_first: tuple[int, int] | None = None
    """(height, supply) of the first reading."""
    burned: dict[int, int] = field(default_factory=dict)
    """height -> tokens its events burned (heights after the first reading)."""
    supply_checks: int = 0
    supply_drift: int = 0
    """The largest |expected - actual| supply seen."""
    errors: int = 0

    def disagreements(self) -> list[int]:
        """Heights at which two nodes hold different blocks or app hashes."""
        return sorted(h for h, nodes in self.headers.items() if len(set(nodes.values())) > 1)

    def heights_compared(self) -> int:
        return sum(1 for nodes in self.headers.values() if len(nodes) > 1)

    def max_block_seconds(self) -> float:
        times = self.block_times
        gaps = [times[h] - times[h - 1] for h in times if h - 1 in times]
        return round(max(gaps), 3) if gaps else 0.0

    def burned_total(self) -> int:
        return sum(self.burned.values())


class Watcher(threading.Thread):
    """Polls the nodes every POLL_SECONDS until stopped; `observations` holds what it saw."""

    def __init__(self, net: Localnet) -> None:
        super().__init__(daemon=True, name="soak-watcher")
        self.net = net
        self.stop_event = threading.Event()
        self.observations = Observations()
        self.next_height: dict[int, int] = {}
        """node -> the next height whose header to read from it."""
        self.next_results = 0
        """The next height whose block results (events) to read from the reference node (0: not started)."""

    def run(self) -> None:
        while not self.stop_event.wait(POLL_SECONDS):
            self.poll()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)
        self.poll()  # a last reading of everything made before the stop

    def poll(self) -> None:
        for index in range(self.net.config.nodes):
            try:
                self.read_headers(index)
            except Exception:  # down, paused or not started yet: read it later
                self.observations.errors += 1
        try:
            self.check_supply()
        except Exception:
            self.observations.errors += 1

    def read_headers(self, index: int) -> None:
        with RpcClient(self.net.config.rpc_url(index), timeout=3.0) as client:
            sync = client.call("status")["sync_info"]
            latest = int(sync["latest_block_height"])
            low = self.next_height.get(index) or int(sync["earliest_block_height"]) or 1
            while low <= latest:
                high = min(latest, low + HEADERS_PER_CALL - 1)
                metas = client.call("blockchain", minHeight=str(low), maxHeight=str(high))["block_metas"]
                for meta in metas:
                    header = meta["header"]
                    height = int(header["height"])
                    self.observations.headers.setdefault(height, {})[index] = (meta["block_id"]["hash"],
                                                                               header["app_hash"])
                    if index == PRUNED_NODE:
                        self.observations.block_times[height] = header_seconds(header["time"])
                low = high + 1
                self.next_height[index] = low

    def check_supply(self) -> None:
        """Read every new block's events from the reference node, then the supply at the latest of them."""
        observations = self.observations
        with RpcClient(self.net.config.rpc_url(PRUNED_NODE), timeout=5.0) as client:
            latest = client.status().latest_block_height
            if observations.supply_first is None:
                answer = client.abci_query("/supply", height=latest)
                observations.supply_first = (answer.height, int(answer.json()["supply"]))
                self.next_results = answer.height + 1
                return
            for height in range(self.next_results, latest + 1):
                results = client.call("block_results", height=str(height))
                events = list(results.get("finalize_block_events") or [])
                for tx in results.get("txs_results") or []:
                    events += tx.get("events") or []
                observations.burned[height] = burned_in(events)
                self.next_results = height + 1
            answer = client.abci_query("/supply", height=latest)
            first_height, first_supply = observations.supply_first
            burned = sum(amount for height, amount in observations.burned.items() if first_height < height <= latest)
            drift = abs(first_supply - burned - int(answer.json()["supply"]))
            observations.supply_checks += 1
            observations.supply_drift = max(observations.supply_drift, drift)
