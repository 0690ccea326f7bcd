"""`trolly-worker`: the compute provider's service.

A worker stakes on chain, joins training tasks its hardware fits, and for every round of a task trains its
share with the compute runtime, commits the result on chain once, and serves what it made (updates,
checkpoints, final weights) from its own blob service. The pieces:

    config.py      the home directory and its `worker.json` (key, node, blob port, stake)
    progress.py    persisted progress, so a restart resumes mid-round and never commits twice
    plan.py        the decision of the loop: given the chain's view of a task and our progress, what next
    round_training.py  one round: resumable training with checkpoints, encoding, the commitment
    commits.py     sending each round's commitment exactly once (signed bytes saved before they are sent)
    weights.py     the global weights W_r: initial, and each next round's from the verified updates
    strategies.py  the honest training strategy (its pace: a step delay emulates a slower device)
    cheat_round.py TEST SWITCH ONLY: a round played by a cheat from `compute.cheats` (`--cheat NAME`)
    market.py      the chain side: queries and the worker's transactions (register, join, commit)
    throughput.py  measuring this machine's samples per second, the H it declares, the block interval
    preflight.py   this machine measured (memory, cores, GPUs, speed, largest models): what it registers and fits
    preflight_record.py  what a preflight found, as plain data (saved, shown, registered) without torch
    earnings.py    what it earned per task and round, from the chain (pay, penalties, collateral, fees)
    why.py         why it was not paid on a task (missed rounds, verdicts, how its membership ended)
    data.py        the task's dataset: local store, bundled build, or fetched by hash
    housekeeping.py  deleting a finished task's round blobs (final weights and dataset kept)
    errors.py      WorkerError and its cases
    service.py     the long-running service (start / run / stop) tying the above together
    display.py     progress display and operator logs
    cli.py         `trolly-worker init | start | status`
    report_commands.py  `trolly-worker preflight | earnings | why` and the shared options
"""
