"""The training-task market (docs/protocol.md, docs/architecture.md section 5): tasks, workers, rounds, verdicts, settlement.

A requester escrows a budget for a task whose spec is stored on chain; registered (staked) workers join it by
locking collateral; each round they commit hashes of their work; a later block's hash picks the segments the
validators replay; two thirds of validator power decide pass or fail; failures are slashed, passes paid by
samples processed, and the rest of the budget returns to the requester.

Modules: `params` (with the economic reasoning), `economics` (cost, collateral, pay splits), `spec` (spec
validation), `records` and `store` (state and its verbs), `sampling`, `tally`, `lifecycle` (members, task
start and end), `round_lifecycle` (close, sample, settle), `end_block` (the end-block schedule), `queries`.
Message handlers live in `trolly.chain.messages.<kind>`, and the market's `Module`, which names them, in
`trolly.chain.modules.market`: both sit above this folder, which imports neither.
"""
