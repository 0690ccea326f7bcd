"""PyTorch's PowerSGD on DiLoCo's outer update: the peer `benchmarks.compression` measures our codec against.

PowerSGD (Vogels et al. 2019) sends a rank-r approximation P Q^T of each weight matrix's gradient, with error
feedback. Here it is PyTorch's own implementation, `torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`,
unchanged: its `PowerSGDState` and `powerSGD_hook`, run by `workers` ranks of a real gloo process group, each a
process of its own (a `FileStore` is the rendezvous; gloo carries the allreduces over loopback). The hook is applied where our codec is: to
each worker's pseudo-gradient (W_r - W_end) once a round, after the same inner steps of the same trainer
(`compute.training.run_round`); the allreduced mean it returns is the round's one update to the same outer
step (`compute.outer_step.outer_step`).

Two things differ from DDP, and why:
- the hook reads a `dist.GradBucket`, which Python cannot construct; `PseudoGradientBucket` gives it the four
  methods it calls (one flat float32 buffer, the tensors as views into it, one bucket, the last);
- DDP needs `start_powerSGD_iter` >= 2 rounds of plain allreduce first, to let it rebuild its buckets. There is
  no DDP here, and two dense float32 rounds would cost more bytes than the whole run of our codec, so each
  rank's state starts at that iteration: PowerSGD compresses from the first round, as our codec does.

Bytes sent per worker are what the hook itself counts as sent after compression
(`PowerSGDState.compression_stats`): for every matrix it compresses, P (rows x r) and Q (columns x r); every
tensor it leaves uncompressed (the biases, and a matrix too small to gain `min_compression_rate`) whole; all
float32, 4 bytes a value. That is each worker's payload into the allreduces, counted once, as our codec's
bytes are its one encoded upload (framing included there, none here). PowerSGD also needs two rounds of
communication a round (the Ps are summed before the Qs can be computed) and an allreduce between the workers;
our codec's update is one blob that anyone aggregates.
"""

from __future__ import annotations

import datetime
import multiprocessing
import pathlib
import sys
import tempfile
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import TaskSpec
from trolly.compute.training import Trainer, evaluate, initial_weights, run_round

FLOAT32_BYTES = 4
MIN_COMPRESSION_RATE = 2  # the hook's default: a matrix is compressed only if that halves what it sends
RENDEZVOUS_TIMEOUT = datetime.timedelta(minutes=5)


class PseudoGradientBucket:
    """What `powerSGD_hook` reads of a `dist.GradBucket`: one flat float32 buffer holding every tensor (in
    sorted name order), the tensors as views into it, and this bucket being the only one (index 0, the last).
    The hook writes the allreduced result into the buffer; `tensors()` reads it back by name."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.names = sorted(tensors)
        self._buffer = torch.cat([tensors[name].detach().to(torch.float32).reshape(-1) for name in self.names])
        self._views = []
        offset = 0
        for name in self.names:
            size = tensors[name].numel()
            self._views.append(self._buffer[offset:offset + size].view(tensors[name].shape))
            offset += size

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def gradients(self) -> list[torch.Tensor]:
        return self._views

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: view.clone() for name, view in zip(self.names, self._views)}


class PowerSGDWorkers:
    """`workers` ranks of one gloo process group, each a process of its own with its own `PowerSGDState` (its
    error feedback residual and its warm-started Q), all with the same random seed as the hook requires.

    Processes, as PowerSGD runs in deployment: each rank has its own global random generator, which the hook
    draws its first Qs from, and its own gloo threads. (Several ranks of one group in one process share both;
    the ranks' collectives then raced for gloo's threads and a run could stall or crash.) This process hands
    each rank its worker's pseudo-gradient over a pipe and reads the allreduced mean back from rank 0."""

    def __init__(self, workers: int, rank: int, seed: int) -> None:
        self.workers = workers
        context = multiprocessing.get_context("spawn")
        self._directory = tempfile.TemporaryDirectory(prefix="trolly-powersgd-")
        store = str(pathlib.Path(self._directory.name) / "rendezvous")
        self._pipes, self._processes = [], []
        for index in range(workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve_rank, args=(index, workers, rank, seed, store, theirs),
                                      daemon=True, name=f"powersgd-rank-{index}")
            process.start()
            theirs.close()
            self._pipes.append(ours)
            self._processes.append(process)
        self._values_sent = 0
        self.errors: list[torch.Tensor | None] = []
        """Each rank's error feedback residual after the last round (the hook's `error_dict` of the bucket)."""

    def mean_update(self, updates: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The workers' pseudo-gradients through the hook: the mean every rank receives (rank 0's copy)."""
        if len(updates) != self.workers:
            raise ValueError(f"{len(updates)} updates for {self.workers} ranks")
        for pipe, update in zip(self._pipes, updates):
            pipe.send({name: tensor.detach().clone() for name, tensor in update.items()})
        answers = [self._receive(pipe) for pipe in self._pipes]
        self._values_sent = answers[0][1]
        self.errors = [answer[2] for answer in answers]
        return answers[0][0]

    def _receive(self, pipe):
        if not pipe.poll(RENDEZVOUS_TIMEOUT.total_seconds()):
            raise RuntimeError("a PowerSGD rank did not answer in time")
        answer = pipe.recv()
        if isinstance(answer, str):
            raise RuntimeError(f"a PowerSGD rank failed: {answer}")
        return answer

    def bytes_sent_per_worker(self) -> int:
        return FLOAT32_BYTES * self._values_sent

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(5)
        self._directory.cleanup()


def _serve_rank(index: int, workers: int, rank: int, seed: int, store: str, pipe) -> None:
    """One rank's process: join the group, then run the hook on each pseudo-gradient sent until None."""
    torch.set_num_threads(1)
    try:
        group = dist.ProcessGroupGloo(dist.FileStore(store, workers), index, workers, RENDEZVOUS_TIMEOUT)
        state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=rank,
                                            min_compression_rate=MIN_COMPRESSION_RATE, use_error_feedback=True,
                                            warm_start=True, random_seed=seed)
        state.iter = state.start_powerSGD_iter  # compress from the first round (see the module docstring)
        while (update := pipe.recv()) is not None:
            bucket = PseudoGradientBucket(update)
            powerSGD_hook.powerSGD_hook(state, bucket).wait()
            error = state.error_dict.get(0)
            pipe.send((bucket.tensors() if index == 0 else None, state.compression_stats()[2],
                       None if error is None else error.clone()))
    except Exception as error:  # reported to the parent, which raises it: a rank never dies silently
        pipe.send(f"{type(error).__name__}: {error}")


def bytes_per_round(shapes: Mapping[str, torch.Size], rank: int) -> int:
    """What one worker sends a round at `rank`, by the hook's own rule for which tensors it compresses."""
    values = 0
    for shape in shapes.values():
        rows = shape[0]
        columns = 1
        for size in shape[1:]:
            columns *= size
        compressed, whole, low_rank = powerSGD_hook._should_compress(rows, columns, min(rows, columns, rank),
                                                                      MIN_COMPRESSION_RATE)
        values += low_rank if compressed else whole
    return FLOAT32_BYTES * values


def rank_matching_bytes(shapes: Mapping[str, torch.Size], rounds: int, target_bytes: int) -> int:
    """The smallest rank at which PowerSGD sends at least `target_bytes` over `rounds` rounds."""
    rank = 1
    while bytes_per_round(shapes, rank) * rounds < target_bytes:
        rank += 1
    return rank


def run_powersgd(spec: TaskSpec, dataset, *, workers: int, rounds: int, rank: int,
                 on_round=None) -> dict:
    """DiLoCo with PowerSGD at `rank` on the outer update: the final test loss and accuracy, and the bytes each
    worker sent."""
    trainer = Trainer(spec, dataset)
    state = GlobalState.initial(initial_weights(spec, dataset.shape))
    ranks = PowerSGDWorkers(workers, rank, spec.training.seed)
    try:
        for round_index in range(rounds):
            results = [run_round(trainer, state.weights, worker_index=worker_index, round_index=round_index,
                                 steps=spec.training.inner_steps)
                       for worker_index in range(workers)]
            mean = ranks.mean_update([result.pseudo_gradient for result in results])
            # every rank holds the same allreduced mean: it is the round's one update, for all the samples
            samples = sum(result.samples_processed for result in results)
            state = outer_step(state, [WorkerUpdate(0, samples, mean)], spec.training.outer_optimizer)
            if on_round is not None:
                on_round(state)
        bytes_sent = ranks.bytes_sent_per_worker()
    finally:
        ranks.close()
    trainer.model.load_state_dict(state.weights)
    loss, accuracy = evaluate(trainer.model, dataset)
    return {"rank": rank, "loss": loss, "accuracy": accuracy, "bytes_per_worker": bytes_sent}


def powersgd_table(specs: Sequence[TaskSpec], dataset, *, workers: int, rounds: int, ranks: Sequence[int],
                   ours_per_seed: Sequence[dict], shapes: Mapping[str, torch.Size]) -> dict:
    """PowerSGD at each of `ranks`, and at the smallest rank that sends at least our codec's bytes, on the
    task of each spec, beside our codec's figures on the same seeds (`ours_per_seed`, by seed).

    Ours beats PowerSGD at equal or fewer bytes when every PowerSGD run that sent at least our bytes ends at a
    higher mean test loss than ours; the matched rank makes sure there is one. A run with fewer bytes and a
    lower loss than ours would beat ours outright, which is reported too."""
    ours = {run["seed"]: run["ours"] for run in ours_per_seed}
    seeds = [spec.training.seed for spec in specs]
    ours_bytes = max(ours[seed]["bytes_per_worker"] for seed in seeds)
    ours_loss = sum(ours[seed]["loss"] for seed in seeds) / len(seeds)
    matched = rank_matching_bytes(shapes, rounds, ours_bytes)
    rows = []
    for rank in sorted({*ranks, matched}):
        per_seed = []
        for spec in specs:
            print(f"seed {spec.training.seed}: PowerSGD rank {rank}, {rounds} rounds", file=sys.stderr)
            per_seed.append({"seed": spec.training.seed,
                             **run_powersgd(spec, dataset, workers=workers, rounds=rounds, rank=rank)})
        bytes_sent = max(run["bytes_per_worker"] for run in per_seed)
        loss = sum(run["loss"] for run in per_seed) / len(per_seed)
        rows.append({"rank": rank, "matched_to_ours": rank == matched, "bytes_sent": bytes_sent,
                     "final_loss": round(loss, 5),
                     "accuracy": round(sum(run["accuracy"] for run in per_seed) / len(per_seed), 4),
                     "bytes_over_ours": round(bytes_sent / ours_bytes, 3),
                     "ours_lower_loss": ours_loss < loss,
                     "per_seed": [{"seed": run["seed"], "final_loss": round(run["loss"], 5),
                                   "accuracy": round(run["accuracy"], 4)} for run in per_seed]})
    at_or_above = [row for row in rows if row["bytes_sent"] >= ours_bytes]
    return {
        "seeds": seeds,
        "ours": {"bytes_sent": ours_bytes, "final_loss": round(ours_loss, 5),
                 "accuracy": round(sum(ours[seed]["accuracy"] for seed in seeds) / len(seeds), 4)},
        "ranks": rows,
        "matched_rank": matched,
        "ours_beats_powersgd_at_equal_or_fewer_bytes": bool(at_or_above) and all(row["ours_lower_loss"] for row in at_or_above),
        "powersgd_beats_ours_with_fewer_bytes": any(row["bytes_sent"] < ours_bytes and not row["ours_lower_loss"]
                                                    for row in rows),
        "error_feedback": True,
        "min_compression_rate": MIN_COMPRESSION_RATE,
    }
