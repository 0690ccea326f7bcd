// Canonical tensor bytes for the browser worker: compute/canonical.py's format, read and written by the one
// JavaScript implementation beside the kernel (compute/wasm/canonical.mjs), which the kernel's checkpoint hash
// uses too. The page and its Web Worker import it from here, so that the browser worker's modules name one place.
//
//   decodeTensors(bytes)   // Map name -> {dtype, shape, bytes, data}; CanonicalError for what Python refuses
//   encodeTensors(named)   // Map name -> {dtype, shape, bytes} to the canonical bytes

export { CanonicalError, DTYPES, decodeTensors, encodeTensors } from "../../../../compute/wasm/canonical.mjs";
