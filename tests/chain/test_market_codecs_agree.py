"""The chain accepts a spec exactly when compute can run its codec and model: the name lists must agree."""

from trolly.chain.market import spec as chain_spec
from trolly.compute.codecs import CODEC_REGISTRY
from trolly.compute.models import MODEL_REGISTRY


def test_chain_accepts_every_codec_compute_registers_and_no_other():
    assert set(chain_spec.CODECS) == set(CODEC_REGISTRY)


def test_chain_accepts_every_model_compute_registers_and_no_other():
    assert set(chain_spec.MODEL_ARCHS) == set(MODEL_REGISTRY)
