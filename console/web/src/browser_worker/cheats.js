// TEST SWITCH ONLY: browser twins of segment cheats of the registry (compute/cheats), so the end-to-end tests
// show a tab that cheats caught by the verifiers' replay and slashed, as a native cheater is. A page plays one
// only when it is opened as a test (`?test=1&cheat=NAME`, page.js); a person's page never does.
//
//   skipped_steps   every segment trains only the first half of its steps, and claims them all
//   changed_lr      every segment trains at twice the spec's learning rate (round_trainer.js scales it)
//
// A cheat changes which steps run, or the lr the kernel was set up with; the checkpoints, the update and the
// commitment are then made as an honest round's are, so what is published is the cheater's claim.

export const CHEATS = {
  skipped_steps: "every segment trains only the first half of its steps, and claims them all",
  changed_lr: "every segment trains at twice the spec's learning rate",
};

function* range(begin, end) {
  for (let step = begin; step < end; step++) yield step;
}

/** {steps(begin, end): the steps a segment really trains, lrScale}, for `name` ('' : honest). */
export function segmentFaker(name) {
  if (name === "" || name === undefined || name === null) return { steps: range, lrScale: 1 };
  if (!(name in CHEATS)) {
    throw new RangeError(`no browser cheat named ${JSON.stringify(name)} (${Object.keys(CHEATS).join(", ")})`);
  }
  if (name === "skipped_steps") {
    return { steps: (begin, end) => range(begin, begin + Math.floor((end - begin) / 2)), lrScale: 1 };
  }
  return { steps: range, lrScale: 2 };
}
