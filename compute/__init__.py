"""The off-chain half of Trolly: deterministic DiLoCo training that a verifier can replay.

A task's spec (`spec.py`) names a model from a registry (`models/`), a content-addressed dataset (`data/`), the
inner and outer optimizers, a codec (`codecs/`) and a determinism profile (`determinism.py`). Each round a
worker trains from the round's global weights with `training.train_segment`, saving a checkpoint every k
steps (`checkpoints.py`) whose hashes are committed as a Merkle root (`checkpoint_merkle.py`); its pseudo-gradient is
encoded by the codec and published through the blob service (`blobs/`). `outer_step.py` turns a round's updates
into the next global weights, bit for bit the same in every process; `pipeline.py` strings a worker's round
together (train, checkpoint, encode with error feedback).

The byte-level contract with the chain and the verifier is `docs/protocol.md`.
"""
