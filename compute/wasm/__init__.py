"""The wasm32 training kernel: one MLP training step in C compiled to WebAssembly (`kernel.c`, committed as
`kernel.wasm`), the same arithmetic in JavaScript (`kernel.mjs`), and what runs it here under wasmtime.

A browser tab trains with the .wasm (or the JavaScript fallback), a verifier replays its segments with the same
.wasm under wasmtime, and both give the same bytes because every float operation of the kernel is fixed
(docs/browser-worker.md): the determinism profile `wasm32` (`profile.py`). `build.py` rebuilds the .wasm from
its source and checks that it is byte for byte the committed one; `instance.py` runs it; `segment.py` trains a
segment of a round from a `TrainingState` to a `TrainingState`, hashed as every checkpoint is.
"""
