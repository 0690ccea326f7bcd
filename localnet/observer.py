"""The demo's live view of the model: the global weights W_r of each round, recomputed and evaluated.

The chain holds hashes, not losses. What a requester can do by itself, and the demo does: rebuild every W_r
exactly as each worker does (W_0 from the spec; W_{r+1} from W_r and the updates of round r that passed
verification, fetched by hash from any member's blob service), evaluate it on the held-out split, and check
its hash against the start weights the members agreed on for round r+1 on chain, and the last one against the
task's final weights hash. So the progress shows the held-out loss as training goes, and the requester sees
that the weights it pays for are the ones the verified work produces.

Best effort: if the updates of a round can no longer be fetched (workers delete round blobs once a task ends),
the observer says so and stops; the final weights are still fetched and evaluated by their hash.
"""

from __future__ import annotations

from trolly.chain.market.records import COMPLETED, PASSED
from trolly.compute.blobs import AddressPolicy, BlobStore
from trolly.compute.data import Dataset
from trolly.compute.models import build_model
from trolly.compute.spec import TaskSpec
from trolly.compute.training import evaluate
from trolly.compute.weights_follower import StartUnavailable, WeightsFollower, agreed_start_hash, round_updates
from trolly.wallet.market_views import TaskView

LOCALNET_ADDRESSES = AddressPolicy(allow_private=True)
"""The localnet's blob services listen on 127.0.0.1."""


class TrainingObserver:
    def __init__(self, spec: TaskSpec, dataset: Dataset, store: BlobStore) -> None:
        self.spec = spec
        self.dataset = dataset
        self.follower = WeightsFollower(spec, dataset.shape, LOCALNET_ADDRESSES, store=store)
        self.state = self.follower.initial()
        self.hashes = {0: self.state.weights_hash().hex()}
        self.stopped = ""
        self.shown_initial = False

    def evaluate_state(self) -> tuple[float, float]:
        model = build_model(self.spec.model.arch, self.spec.model.config, self.dataset.shape, self.spec.training.seed)
        model.load_state_dict(dict(self.state.weights))
        return evaluate(model, self.dataset)

    async def advance(self, view: TaskView) -> list[str]:
        """Lines for each W_{r+1} whose round r has settled since the last call (round r is settled once the
        task has moved past it)."""
        lines = []
        if not self.shown_initial:
            self.shown_initial = True
            loss, accuracy = self.evaluate_state()
            lines.append(f"W_0 (the spec's initial weights): held-out loss {loss:.4f}, accuracy {accuracy:.4f}")
        while not self.stopped and self.state.round < view.rounds and (
                view.round > self.state.round or view.status == COMPLETED):
            round_index = self.state.round
            updates = round_updates(view, round_index)
            try:
                self.state = await self.follower.state(round_index + 1, view)
            except StartUnavailable as error:
                self.stopped = f"updates of round {round_index} are no longer served ({len(error.missing)} missing)"
                return lines + [f"cannot recompute W_{round_index + 1}: {self.stopped}"]
            self.hashes[self.state.round] = self.state.weights_hash().hex()
            loss, accuracy = self.evaluate_state()
            passed = sum(1 for u in updates if u.outcome == PASSED)
            lines.append(f"W_{self.state.round} from {passed} verified update(s) of round {round_index}: "
                         f"held-out loss {loss:.4f}, accuracy {accuracy:.4f}")
        return lines

    def mismatches(self, view: TaskView) -> list[str]:
        """Rounds whose recomputed W_r differs from what the chain recorded (the agreed start weights of round
        r, or for r = rounds the final weights)."""
        wrong = []
        for round_index, digest in self.hashes.items():
            on_chain = view.final_weights_hash if round_index == view.rounds else agreed_start_hash(view, round_index)
            if on_chain and on_chain != digest:
                wrong.append(f"W_{round_index}: recomputed {digest[:16]}, chain {on_chain[:16]}")
        return wrong
