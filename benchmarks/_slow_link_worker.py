"""One worker process of `benchmarks.slow_link` (run inside its network namespace when shaped).

Reads control messages (JSON lines) on stdin, writes its own on stdout; the data itself (updates or
gradients) goes over HTTP through `compute/blobs`, with the configured one-way latency added around every
fetch and, for the simulated link, the bytes paced at the configured rate.
"""

from __future__ import annotations

import asyncio
import json
import sys

import torch

from trolly.compute.blobs import AddressPolicy, BlobClient, BlobServer, BlobStore, BlobWriter, RetryPolicy
from trolly.compute.blobs import blob_session
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.data.dataset import sample_batch
from trolly.compute.pipeline import train_and_encode
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.training import Trainer, evaluate, initial_weights

from .compression import FULL_SEEDS, MLP_SETTINGS, make_spec

RETRY = RetryPolicy(attempts=5, initial_delay=0.05, max_delay=1.0, request_timeout=120)


class SimulatedDownlink:
    """The worker's incoming link when namespaces are not available: transfers queue behind each other at
    `rate_mbit` (the senders' uplinks are not modelled)."""

    def __init__(self, rate_mbit: float) -> None:
        self.rate_mbit = rate_mbit
        self.free_at = 0.0

    async def carry(self, size: int) -> None:
        if not self.rate_mbit:
            return
        loop = asyncio.get_running_loop()
        start = max(loop.time(), self.free_at)
        self.free_at = start + size * 8 / (self.rate_mbit * 1e6)
        await asyncio.sleep(self.free_at - loop.time())


class LinkClient(BlobClient):
    """A blob client whose transport adds one-way latency before each request and after each response
    (and, on the simulated link, queues the bytes on the worker's downlink)."""

    def __init__(self, urls, latency: float, downlink: SimulatedDownlink, session=None) -> None:
        super().__init__(urls, retry=RETRY, session=session)
        self.latency = latency
        self.downlink = downlink

    async def fetch(self, digest: str) -> bytes:
        await asyncio.sleep(self.latency)  # the request travels
        data = await super().fetch(digest)
        await self.downlink.carry(len(data))
        await asyncio.sleep(self.latency)  # the response travels
        return data


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Commands:
    """The parent's messages, read on their own thread so that they arrive while this worker trains.

    A peer's hash (`{"peer", "hash"}`) starts fetching that peer's blob at once, as the worker service's
    `UpdateMirror` fetches updates as their commitments appear; everything else (the start, the exchange's
    barrier with all hashes, stop) is queued for `next()`. Each exchange's fetches are taken by `fetches()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fetch) -> None:
        self._queue: asyncio.Queue[dict] = asyncio.Queue()
        self._fetch = fetch
        self._fetching: dict[tuple[int, str], asyncio.Task] = {}
        self._reader = loop.create_task(self._read(loop))

    async def _read(self, loop) -> None:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                await self._queue.put({"stop": True})
                return
            message = json.loads(line)
            if "peer" in message:
                key = (message["peer"], message["hash"])
                self._fetching[key] = asyncio.ensure_future(self._fetch(*key))
            else:
                await self._queue.put(message)

    async def next(self) -> dict:
        return await self._queue.get()

    def fetches(self, hashes: list[str], own: int) -> list:
        """Awaitables of every peer's blob of this exchange (started early where its hash came early)."""
        return [self._fetching.pop((peer, digest), None) or self._fetch(peer, digest)
                for peer, digest in enumerate(hashes) if peer != own]


class LinkWorker:
    """One benchmark worker: its trainer, blob store and server, its link to the others, and the exchanges."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.index = config["index"]
        blobs = build_dataset("digits")
        self.dataset = dataset_from_blobs(blobs)
        settings = dict(MLP_SETTINGS, codec=config["codec"], inner_steps=config["inner_steps"])
        self.spec = make_spec(blobs.manifest_hash, {"arch": "mlp", "config": {"hidden": [1024, 1024]}}, "digits",
                              settings, rounds=config["max_rounds"] + 1, seed=FULL_SEEDS[0])
        self.trainer = Trainer(self.spec, self.dataset)
        self.store = BlobStore(config["store"])
        self.writer = BlobWriter(self.store)  # checkpoints reach the disk while training goes on, as in a worker
        self.server = BlobServer(self.store, host=config["host"], port=config["port"])
        self.downlink = SimulatedDownlink(config["simulated_rate_mbit"])
        self.published_bytes = 0
        self.own_digests: list[str] = []
        self.last_fetch_seconds = 0.0  # wall time of the latest exchange's fetches: what the link costs
        self.session = None
        self.commands: Commands | None = None

    async def start(self) -> bool:
        """Serve blobs, say ready, and wait for the start; False when told to stop instead."""
        await self.server.start()
        # The benchmark's workers reach each other on loopback or on the private addresses of its veth pairs.
        self.session = blob_session(AddressPolicy(allow_private=True), RETRY.request_timeout)
        self.commands = Commands(asyncio.get_running_loop(), self.fetch_from)
        emit({"ready": True})
        return "stop" not in await self.commands.next()

    async def close(self) -> None:
        await self.session.close()
        await self.server.stop()

    async def fetch_from(self, number: int, digest: str) -> bytes:
        config = self.config
        return await LinkClient([config["peers"][number]], config["latency"], self.downlink, self.session).fetch(digest)

    async def exchange(self, own_data: bytes) -> list[bytes] | None:
        """Publish, wait for everyone's hashes, fetch the peers' blobs (own one locally), in worker order."""
        digest = self.store.put(own_data)
        self.published_bytes += len(own_data)
        self.own_digests.append(digest)
        if self.config["mode"] == "dense" and len(self.own_digests) > 2:
            # everyone has published the exchange after it, so everyone has fetched it: free the disk
            stale = self.own_digests.pop(0)
            if stale not in self.own_digests:
                self.store.path(stale).unlink(missing_ok=True)
        emit({"hash": digest, "bytes_published": self.published_bytes})
        command = await self.commands.next()
        if "stop" in command:
            return None
        hashes = command["hashes"]
        loop = asyncio.get_running_loop()
        began = loop.time()  # from the barrier: what the link still costs once everyone has published
        others = iter(await asyncio.gather(*self.commands.fetches(hashes, self.index)))
        self.last_fetch_seconds = loop.time() - began
        return [own_data if number == self.index else next(others) for number in range(len(hashes))]

    async def run_diloco(self) -> None:
        """Ours: rounds of inner steps, each worker's encoded update exchanged, then the outer step."""
        loop = asyncio.get_running_loop()
        spec, trainer, dataset = self.spec, self.trainer, self.dataset
        codec = get_codec(spec.codec)
        state = GlobalState.initial(initial_weights(spec, dataset.shape))
        feedback = ErrorFeedback(codec)
        for round_index in range(self.config["max_rounds"] + 1):
            encoded = await loop.run_in_executor(None, lambda: train_and_encode(
                trainer, feedback, state.weights, worker_index=self.index, round_index=round_index,
                steps=spec.training.inner_steps,
                sink=lambda record, data: self.writer.write(record.digest.hex(), data)))
            everyone = await self.exchange(encoded.encoded_update)
            if everyone is None:
                break

            def aggregate(state=state, everyone=everyone, samples=encoded.result.samples_processed) -> GlobalState:
                updates = [WorkerUpdate(number, samples, codec.decode(data)) for number, data in enumerate(everyone)]
                return outer_step(state, updates, spec.training.outer_optimizer)

            # off the event loop, which serves this worker's update to the others meanwhile
            state = await loop.run_in_executor(None, aggregate)
            if self.index == 0:
                trainer.model.load_state_dict(state.weights)
                accuracy = (await loop.run_in_executor(None, evaluate, trainer.model, dataset))[1]
                emit({"accuracy": accuracy, "fetch_seconds": self.last_fetch_seconds})

    async def run_dense(self) -> None:
        """The baseline: dense fp32 data parallel, every step's gradients exchanged and averaged."""
        loop = asyncio.get_running_loop()
        spec, trainer, dataset, config = self.spec, self.trainer, self.dataset, self.config
        codec = get_codec("fp32")
        model = trainer.model
        inner = spec.training.inner_optimizer
        optimizer = torch.optim.AdamW(model.parameters(), lr=inner.lr, weight_decay=inner.weight_decay, foreach=False)
        for step in range(config["max_steps"] + 1):
            def compute_gradient():
                inputs, targets = sample_batch(dataset, spec.training.batch_size, spec.training.seed, self.index, 0,
                                               step)
                loss = trainer.loss(inputs, targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                return codec.encode({name: parameter.grad for name, parameter in model.named_parameters()})
            everyone = await self.exchange(await loop.run_in_executor(None, compute_gradient))
            if everyone is None:
                break
            average_gradients(model, [codec.decode(data) for data in everyone])
            optimizer.step()
            if self.index == 0:
                due = (step + 1) % config["eval_every"] == 0
                emit({"accuracy": evaluate(model, dataset)[1] if due else None,
                      "fetch_seconds": self.last_fetch_seconds})


def average_gradients(model: torch.nn.Module, gradients: list[dict]) -> None:
    """Set each parameter's gradient to the mean of the workers' gradients, in worker order."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            total = gradients[0][name].clone()
            for other in gradients[1:]:
                total += other[name]
            parameter.grad = total / len(gradients)


async def main(config: dict) -> None:
    worker = LinkWorker(config)
    if await worker.start():
        if config["mode"] == "ours":
            await worker.run_diloco()
        else:
            await worker.run_dense()
    await worker.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
