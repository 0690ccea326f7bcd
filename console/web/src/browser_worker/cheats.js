// TEST SWITCH ONLY: the browser twin of every cheat of the registry (compute/cheats/builtin.py), so the tests
// show each lie told by a tab caught by the verifiers' replay as its native twin is, and a tab that cheats
// slashed as a native cheater is. A page plays one only when it is opened as a test (`?test=1&cheat=NAME`,
// page.js); a person's page never does, and refuses a cheat before anything is signed.
//
//   const plan = cheatPlan(name);     // '' : the honest plan
//   plan.kernel      {lrScale, batchFraction}          the kernel's setup (round_segments.js prepareTask)
//   plan.data(data)  the split and precision the kernel trains on (`testSplit`: it needs the test split)
//   plan.segment     (kernel, context) -> {state, losses}   how each segment is trained or faked (cheat_segments.js)
//   plan.round       what the round claims around its training (round_publication.js): the worker index it
//                    trains as, its start weights, a replay of its previous round, the samples, forged blobs,
//                    withheld checkpoints, the final report's hash
//
// Every twin fakes every segment it can, as a native worker with `--cheat` does. The names are the registry's:
// tests/console/browser_worker/test_browser_cheats.py fails when the registry has a cheat this file lacks.

import { alteredUpdate, chosenStart, forgedFinalHash, garbageCheckpoint, garbageUpdate } from "./cheat_forgeries.js";
import * as segments from "./cheat_segments.js";

export const CHEATS = {
  skipped_steps: "every segment trains only the first half of its steps, and claims them all",
  interpolated: "every checkpoint drawn on the line through one real step (Fang et al. 2023)",
  half_batch: "every segment trains on half of each batch",
  other_data: "every segment trains on the test split instead of the prescribed batches",
  bf16: "every step computed from weights and data rounded to bfloat16",
  fp16: "every step computed from weights and data rounded to float16",
  changed_lr: "every segment trains at twice the spec's learning rate",
  random_weights: "every checkpoint is noise of an update's size around the last, no training",
  withheld: "no segment is trained and no end checkpoint is ever served",
  fewer_steps: "trains the first half of the round, claims all of it (later checkpoints repeat)",
  inflated_samples: "trains honestly but claims twice the samples it processed",
  copied_update: "copies the whole round of the next worker index (trained from the same start)",
  replayed_round: "re-serves its own previous round's checkpoints, claiming this round's start",
  forged_update: "trains honestly but publishes another update than its checkpoints give",
  garbage_blobs: "trains honestly, then publishes and commits hostile blobs that only decoding exposes",
  arbitrary_start: "trains honestly from start weights of its own choosing and commits their hash",
  forged_final: "trains every round honestly, then reports final weights of its own choosing",
};

const same = (value) => value;

const HONEST = {
  kernel: { lrScale: 1, batchFraction: 1 },
  data: same,
  testSplit: false,
  segment: segments.honestSegment,
  round: { workerIndex: same, startWeights: same, replaysPrevious: false, samples: same, forgeCheckpoint: null,
    forgeUpdate: null, withholds: false, finalHash: same },
};

/** The data rounded by `round16` (the features; the classes are integers). */
function lowPrecision(round16) {
  return (data) => ({ ...data, inputs: data.inputs.map(round16) });
}

const TWINS = {
  skipped_steps: { segment: segments.skippedSteps },
  interpolated: { segment: segments.interpolated },
  half_batch: { kernel: { lrScale: 1, batchFraction: 0.5 } },
  other_data: { testSplit: true, data: (data) => ({ ...data, inputs: data.testInputs, targets: data.testTargets }) },
  bf16: { segment: segments.lowPrecisionSegment(segments.toBfloat16), data: lowPrecision(segments.toBfloat16) },
  fp16: { segment: segments.lowPrecisionSegment(segments.toFloat16), data: lowPrecision(segments.toFloat16) },
  changed_lr: { kernel: { lrScale: 2, batchFraction: 1 } },
  random_weights: { segment: segments.randomWeights },
  withheld: { segment: segments.untrained, round: { withholds: true } },
  fewer_steps: { segment: segments.fewerSteps },
  inflated_samples: { round: { samples: (claimed) => 2 * claimed } },
  copied_update: { round: { workerIndex: (index) => index + 1 } },
  replayed_round: { round: { replaysPrevious: true } },
  forged_update: { round: { forgeUpdate: alteredUpdate } },
  garbage_blobs: { round: { forgeCheckpoint: garbageCheckpoint, forgeUpdate: garbageUpdate } },
  arbitrary_start: { round: { startWeights: chosenStart } },
  forged_final: { round: { finalHash: forgedFinalHash } },
};

/** The plan of cheat `name` ('', null or undefined: honest); a RangeError naming the known ones otherwise. */
export function cheatPlan(name) {
  if (name === "" || name === undefined || name === null) return HONEST;
  if (!(name in CHEATS) || !(name in TWINS)) {
    throw new RangeError(`no browser cheat named ${JSON.stringify(name)} (${Object.keys(CHEATS).join(", ")})`);
  }
  const twin = TWINS[name];
  return { ...HONEST, ...twin, name, round: { ...HONEST.round, ...(twin.round ?? {}) } };
}
