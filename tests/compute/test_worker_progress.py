"""The worker's saved progress, configuration and throughput planning (`progress.py`, `config.py`,
`throughput.py`): what a restart reads back, what a bad file does, how many steps a worker declares."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trolly.compute.worker.config import WorkerConfig, load_config, save_config
from trolly.compute.worker.errors import WorkerHomeError
from trolly.compute.worker.progress import FINISHED, WorkerState
from trolly.compute.worker.preflight_record import declared_speed
from trolly.compute.worker.throughput import measure_reference, plan_steps


def test_progress_survives_a_reload(tmp_path):
    state = WorkerState.load(tmp_path)
    progress = state.add_task(3, "aa" * 32, worker_index=2)
    round_one = progress.round(1)
    round_one.steps, round_one.checkpoints, round_one.commit_tx = 20, ["01" * 32, "02" * 32], "0a0b"
    progress.global_states[1] = "03" * 32
    state.save()
    again = WorkerState.load(tmp_path)
    loaded = again.task(3)
    assert loaded.worker_index == 2 and loaded.global_states == {1: "03" * 32}
    assert loaded.rounds[1].checkpoints == ["01" * 32, "02" * 32] and loaded.rounds[1].commit_tx == "0a0b"
    assert [p.task_id for p in again.active_tasks()] == [3]
    again.finish_task(3, "task completed")
    final = WorkerState.load(tmp_path)
    assert final.task(3).status == FINISHED and final.active_tasks() == [] and final.finished_count() == 1
    assert state.add_task(3, "aa" * 32, 2) is progress  # joining twice keeps the progress


def test_a_damaged_state_file_is_refused_not_reset(tmp_path):
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(WorkerHomeError, match="cannot read"):
        WorkerState.load(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(WorkerHomeError, match="version"):
        WorkerState.load(tmp_path)


def test_saving_leaves_no_temporary_files_and_is_private(tmp_path):
    state = WorkerState.load(tmp_path)
    state.add_task(1, "bb" * 32, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600


def test_config_round_trip_and_refusals(tmp_path):
    config = WorkerConfig(key_name="w", keyring_backend="test", blob_port=8700, stake=5, fee=1)
    save_config(tmp_path, config)
    assert load_config(tmp_path) == config and config.blob_url == "http://127.0.0.1:8700"
    with pytest.raises(WorkerHomeError, match="not a worker home"):
        load_config(tmp_path / "elsewhere")
    document = json.loads((tmp_path / "worker.json").read_text())
    (tmp_path / "worker.json").write_text(json.dumps({**document, "stakee": 1}))
    with pytest.raises(WorkerHomeError, match="unknown field"):
        load_config(tmp_path)
    with pytest.raises(WorkerHomeError):
        WorkerConfig(key_name="w", blob_port=70000)
    with pytest.raises(WorkerHomeError):
        WorkerConfig(key_name="w", stake=-1)
    with pytest.raises(WorkerHomeError, match="public URL"):
        WorkerConfig(key_name="w", public_url="ftp://example")
    assert WorkerConfig(key_name="w", blob_port=1, public_url="https://w.example/").blob_url == "https://w.example"


@given(inner=st.integers(1, 500), batch=st.integers(1, 256), speed=st.floats(1.0, 1e6),
       seconds=st.one_of(st.none(), st.floats(0.0, 1e4)), slowdown=st.floats(1.0, 10.0))
def test_declared_steps_stay_within_the_spec_and_shrink_with_slowdown(inner, batch, speed, seconds, slowdown):
    steps = plan_steps(inner, batch, speed, seconds, slowdown)
    assert 1 <= steps <= inner
    assert steps <= plan_steps(inner, batch, speed, seconds, 1.0)
    if seconds is None and slowdown >= 2.0:
        assert steps <= max(1, inner // 2)


def test_the_commit_window_limits_the_declared_steps():
    # 100 samples/s, batch 10, 20 s window of which half is planned for training: 100 steps fit.
    assert plan_steps(500, 10, 100.0, 20.0) == 100
    assert plan_steps(50, 10, 100.0, 20.0) == 50
    assert plan_steps(50, 10, 100.0, 0.0) == 1
    with pytest.raises(ValueError):
        plan_steps(50, 10, 100.0, None, slowdown=0.5)


def test_measured_throughput_is_positive_and_declared_as_an_integer():
    measured = measure_reference(duration=0.05, min_steps=2)
    assert measured.steps >= 2 and measured.samples_per_second > 0
    assert declared_speed(0.5) == 1 and declared_speed(300.0, 2.0) == 150  # the chain refuses 0


def test_pruning_a_finished_task_keeps_final_weights_and_blobs_other_tasks_name(tmp_path):
    from trolly.compute.blobs import BlobStore
    from trolly.compute.worker.housekeeping import prune_task

    store = BlobStore(tmp_path / "blobs")
    shared, own, update, final, dataset = (store.put(f"blob {name}".encode()) for name in
                                           ("shared", "own", "update", "final", "dataset"))
    state = WorkerState.load(tmp_path)
    done = state.add_task(1, "aa" * 32, 0)
    done.round(0).checkpoints = [shared, own]
    done.round(0).update_hash = update
    done.final_weights_hash = final
    other = state.add_task(2, "bb" * 32, 0)
    other.round(0).checkpoints = [shared]
    store.set_checkpoints(1, 0, [shared, own])
    deleted, freed = prune_task(store, state, 1)
    assert (deleted, freed) == (2, len(b"blob own") + len(b"blob update"))
    assert not store.has(own) and not store.has(update)
    assert store.has(shared) and store.has(final) and store.has(dataset)
    assert not (store.root / "tasks" / "1").exists()


def test_the_saved_state_follows_every_change_of_a_round_the_cache_included(tmp_path):
    """Each round's JSON is cached between saves; an appended checkpoint or any changed field must reach disk."""
    state = WorkerState.load(tmp_path)
    task = state.add_task(4, "ab" * 32, worker_index=2)
    for index in range(3):
        round_progress = task.round(index)
        round_progress.steps = 10 + index
        round_progress.checkpoints.append(f"{index:064x}")
    task.global_states[1] = "cd" * 32
    state.save()
    changes = [lambda p: p.checkpoints.append("ee" * 32), lambda p: setattr(p, "update_hash", "12" * 32),
               lambda p: setattr(p, "committed", True), lambda p: setattr(p, "commit_tx", "00ff"),
               lambda p: p.checkpoints.clear()]
    for change in changes:
        change(task.round(1))
        state.save()
        on_disk = json.loads((tmp_path / "state.json").read_text())
        assert on_disk == {"version": 1, "tasks": {"4": task.to_json()}}
        assert WorkerState.load(tmp_path).task(4) == task
