"""W_0 of a task that allows the `wasm32` kernel: an initialisation a browser computes to the same bits.

Every other task starts from torch's `nn.Linear` initialisation under the spec's seed (`models.build_model`),
drawn from torch's Mersenne Twister through its uniform sampler: a browser tab could reproduce that only by
porting both. A task whose `determinism.kernels` allows `wasm32` (an MLP on classification features,
`chain/market/spec.py`'s `kernels_problem`) is joined by tabs, so its W_0 is defined by integer arithmetic
and two correctly rounded float32 operations, written again in JavaScript
(`console/web/src/browser_worker/initial_weights.js`) and compared bit for bit by the tests:

    tensor t      the state_dict's order: layers.0.weight = 0, layers.0.bias = 1, layers.2.weight = 2, ...
    key_t         mix((mix((DOMAIN ^ seed) + GOLDEN) ^ t) + GOLDEN)               DOMAIN = "trollyi1"
    element i     r = mix(key_t + (i + 1) * GOLDEN); u = r >> 40                  (row-major; 24 bits)
                  x = (2u + 1 - 2^24) * 2^-24                                      (exact: odd, in (-1, 1))
    bound         b = fl32(1 / fl32(sqrt(fan_in)))                                 (fan_in: the layer's inputs)
    value         fl32(x * b)

all integers modulo 2^64, `mix` splitmix64's finalizer (the kernel's, `compute/wasm/kernel.c`), `fl32` one
IEEE-754 rounding to float32. Weights and biases are uniform in (-1/sqrt(fan_in), 1/sqrt(fan_in)), the bounds
torch's `nn.Linear` draws from (kaiming-uniform with a = sqrt(5)), so training starts as it would under torch.
"""

from __future__ import annotations

import numpy as np
import torch

from .models import DataShape, make_config

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
INIT_DOMAIN = int.from_bytes(b"trollyi1", "big")
"""The stream's domain, so that no key of the kernel's batch order ("trollyw1") is ever one of W_0's."""
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def mix64(z: int) -> int:
    """splitmix64's finalizer on one integer modulo 2^64."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _mix64_array(z: np.ndarray) -> np.ndarray:
    """`mix64` elementwise on uint64 (numpy's uint64 arithmetic wraps modulo 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def tensor_key(seed: int, tensor_index: int) -> int:
    """The key of tensor `tensor_index`'s stream under the spec's seed."""
    key = mix64(((INIT_DOMAIN ^ seed) + GOLDEN) & MASK)
    return mix64(((key ^ tensor_index) + GOLDEN) & MASK)


def uniform_tensor(seed: int, tensor_index: int, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """Tensor `tensor_index` of W_0: float32 values uniform in (-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    count = int(np.prod(shape, dtype=np.int64))
    with np.errstate(over="ignore"):
        counters = (np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN)) + np.uint64(tensor_key(seed, tensor_index))
        top = (_mix64_array(counters) >> np.uint64(40)).astype(np.int64)
    unit = (2 * top + 1 - (1 << 24)).astype(np.float32) * np.float32(2.0 ** -24)
    bound = np.float32(1.0) / np.sqrt(np.float32(fan_in))
    return (unit * bound).astype(np.float32).reshape(shape)


def mlp_initial_weights(sizes: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    """W_0 of the MLP template with layer sizes (inputs, *hidden, classes), in the state_dict's names and order."""
    weights: dict[str, np.ndarray] = {}
    for layer, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        weights[f"layers.{2 * layer}.weight"] = uniform_tensor(seed, 2 * layer, (outputs, inputs), inputs)
        weights[f"layers.{2 * layer}.bias"] = uniform_tensor(seed, 2 * layer + 1, (outputs,), inputs)
    return weights


def portable_initial_weights(arch: str, config, shape: DataShape, seed: int) -> dict[str, torch.Tensor]:
    """W_0 of an MLP task allowing the wasm32 kernel (the spec's model section, the dataset's shape, its seed)."""
    model = make_config(arch, config, shape)
    sizes = (model.input_size, *model.hidden, model.num_classes)
    return {name: torch.from_numpy(array) for name, array in mlp_initial_weights(sizes, seed).items()}
