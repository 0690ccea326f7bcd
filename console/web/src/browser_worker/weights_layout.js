// The model's weights in the two layouts the browser worker moves between: the kernel's one flat Float32Array
// (per layer: weight [out][in], then bias) and the protocol's tensors by state_dict name (`layers.<2l>.weight`
// and `.bias`), which the update, the aggregation and the canonical encoding read.
//
//   const named = namedWeights(flat, sizes);    // Map name -> {dtype: "float32", shape, data: Float32Array}
//   const flat = flatWeights(named, sizes);

import { parameterShapes } from "../../../../compute/wasm/checkpoint.mjs";

/** The tensor's floats, whether a Map value is a Float32Array or a tensor {data}. */
function floatsOf(value) {
  return value instanceof Float32Array ? value : value.data;
}

export function namedWeights(flat, sizes) {
  const named = new Map();
  for (const { name, shape, offset, size } of parameterShapes(sizes)) {
    named.set(name, { dtype: "float32", shape, data: flat.slice(offset, offset + size) });
  }
  return named;
}

export function flatWeights(named, sizes) {
  const shapes = parameterShapes(sizes);
  const last = shapes[shapes.length - 1];
  const flat = new Float32Array(last.offset + last.size);
  for (const { name, offset, size } of shapes) {
    const floats = floatsOf(named.get(name));
    if (floats === undefined || floats.length !== size) {
      throw new RangeError(`the weights lack ${name} of ${size} floats for a model of sizes ${sizes.join("-")}`);
    }
    flat.set(floats, offset);
  }
  return flat;
}
