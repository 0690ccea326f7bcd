"""A fetched MLP as an ONNX graph (`task fetch --onnx`), for runtimes that read ONNX rather than safetensors.

The graph is built node by node with `onnx.helper` rather than traced by `torch.onnx.export`: an MLP is a chain
of Linear layers with ReLU between them, each Linear one `Gemm` (inputs times the weight transposed, plus the
bias), so the graph is the model's own weights in the model's own order and nothing else, and exporting needs
no tracer. It reads `features` (float32, rows x input size: a raw row made into features by the task's
`preprocessing.json` first, as the README shows) and answers `scores` (the model's outputs) and `probabilities`
(their softmax over the classes). A regression MLP's one score is its standardized prediction: the target's mean
and scale in `preprocessing.json` bring it back to the column's units (its `probabilities` are a constant 1). Opset and IR version are pinned to ones onnxruntime has long read.
"""

from __future__ import annotations

import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from ..models.mlp import MLP
from .results import ResultError

OPSET = 17
IR_VERSION = 8
"""The IR version of ONNX 1.12, the first release with opset 17."""
INPUT = "features"
OUTPUTS = ("scores", "probabilities")


def mlp_onnx(model: torch.nn.Module) -> bytes:
    """The serialized ONNX model of an MLP's forward pass with a softmax after it; other models are refused."""
    if not isinstance(model, MLP):
        raise ResultError(f"--onnx exports an mlp; this task trained a {type(model).__name__}")
    nodes, weights = [], []
    current = INPUT
    for index, layer in enumerate(model.layers):
        if isinstance(layer, torch.nn.Linear):
            names = (f"layers.{index}.weight", f"layers.{index}.bias")
            weights += [numpy_helper.from_array(tensor.detach().numpy(), name)
                        for tensor, name in zip((layer.weight, layer.bias), names)]
            out = OUTPUTS[0] if index == len(model.layers) - 1 else f"linear_{index}"
            nodes.append(helper.make_node("Gemm", [current, *names], [out], transB=1))
        else:  # the MLP puts a ReLU after every Linear but the last
            out = f"relu_{index}"
            nodes.append(helper.make_node("Relu", [current], [out]))
        current = out
    nodes.append(helper.make_node("Softmax", [OUTPUTS[0]], [OUTPUTS[1]], axis=1))
    inputs, classes = model.layers[0].in_features, model.layers[-1].out_features
    graph = helper.make_graph(
        nodes, "trolly_mlp", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["rows", inputs])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["rows", classes]) for name in OUTPUTS], weights)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="trolly")
    onnx.checker.check_model(built)
    return built.SerializeToString()
