// The browser worker's weights code on shared test vectors: reads a JSON list of requests on stdin, answers a
// JSON list (test_weights_vectors.py computes the same in Python and compares). Tensors travel as
// {name: {shape, data: base64 little-endian float32}}.

import { exactSeed, initialWeights } from "../../../console/web/src/browser_worker/initial_weights.js";
import { encodeUpdate } from "../../../console/web/src/browser_worker/update.js";
import { aggregateRound } from "../../../console/web/src/browser_worker/outer_step.js";
import { WeightsFollower } from "../../../console/web/src/browser_worker/aggregate.js";
import { checkpointRoot } from "../../../console/web/src/browser_worker/merkle.js";
import { encodeTensors, sha256Hex, weightsHash } from "../../../console/web/src/browser_worker/canonical_encode.js";
import { decode } from "../../../console/web/src/browser_worker/codecs.js";

function tensors(named) {
  const map = new Map();
  for (const [name, { shape, data }] of Object.entries(named)) {
    const bytes = Buffer.from(data, "base64");
    map.set(name, { dtype: "float32", shape, data: new Float32Array(new Uint8Array(bytes).buffer) });
  }
  return map;
}

const bytesOf = (b64) => new Uint8Array(Buffer.from(b64, "base64"));
const b64 = (bytes) => Buffer.from(bytes).toString("base64");

function stateOf({ round, weights, momentum }) {
  return { round, weights: tensors(weights), momentum: tensors(momentum) };
}

function describe(state) {
  return { round: state.round, weights: weightsHash(state.weights), momentum: weightsHash(state.momentum) };
}

async function answer(request) {
  try {
    switch (request.op) {
      case "initial": {
        const spec = JSON.parse(request.specText);
        spec.training.seed = exactSeed(request.specText);
        return { hash: weightsHash(initialWeights(spec, request.shape)) };
      }
      case "update_rounds": {
        let residual = null;
        return request.rounds.map(({ start, end }) => {
          const made = encodeUpdate(request.spec, tensors(start), tensors(end), residual);
          residual = made.residualTensors;
          return { update: b64(made.update), updateHash: made.updateHash, residualHash: made.residualHash };
        });
      }
      case "decode":
        return { hash: weightsHash(decode(request.codec, bytesOf(request.bytes))) };
      case "aggregate": {
        const updates = request.updates.map((u) => ({ ...u, bytes: bytesOf(u.bytes) }));
        return describe(aggregateRound(stateOf(request.previous), updates, request.spec));
      }
      case "follow": {
        const served = new Map(Object.entries(request.blobs).map(([digest, data]) => [digest, bytesOf(data)]));
        const follower = new WeightsFollower(request.spec, request.shape,
          { fetchUpdate: async (digest) => served.get(digest) || null });
        const state = await follower.state(request.round, request.view);
        return { ...describe(state), hash: state.hash, disagreement: follower.disagreement(state, request.view) };
      }
      case "merkle":
        return { root: checkpointRoot(request.hashes) };
      case "canonical":
        return { hash: sha256Hex(encodeTensors(tensors(request.tensors))) };
      default:
        return { error: `unknown op ${request.op}` };
    }
  } catch (error) {
    return { error: `${error.name}: ${error.message}` };
  }
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const requests = JSON.parse(Buffer.concat(chunks).toString());
const answers = [];
for (const request of requests) answers.push(await answer(request));
process.stdout.write(JSON.stringify(answers));
