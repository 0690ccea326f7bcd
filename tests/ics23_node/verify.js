// Checks Trolly's query proofs with @confio/ics23 (the ICS23 reference verifier for JavaScript) and no Trolly code.
//
// Usage: node verify.js CASES.json. The file holds the two proof specs (ProofSpec protobuf, base64) and cases,
// each a proof (CommitmentProof protobuf, base64) as a node's Query answered it, the app hash from the next
// block's header, the key and value to check, and whether @confio/ics23 must accept it. Records whose layout
// docs/protocol.md gives are also read here and compared with the JSON answer: an account's balance and nonce
// (two big-endian u64), a task's JSON record. Prints one JSON line of results; exits 1 if any case disagrees.
"use strict";

const fs = require("fs");
const { ics23, verifyMembership, verifyNonMembership } = require("@confio/ics23");

const bytes = (b64) => Uint8Array.from(Buffer.from(b64, "base64"));

function recordAgrees(check, record, answer) {
  if (check === "account") {
    const raw = Buffer.from(record);
    return raw.readBigUInt64BE(0) === BigInt(answer.balance) && raw.readBigUInt64BE(8) === BigInt(answer.nonce);
  }
  if (check === "task") {
    const task = JSON.parse(Buffer.from(record).toString("utf8"));
    return task.id === answer.id && task.status === answer.status && task.escrow === answer.escrow_remaining;
  }
  return true;
}

function run(testCase, specs) {
  const proof = ics23.CommitmentProof.decode(bytes(testCase.proof));
  const root = Buffer.from(testCase.app_hash, "hex");
  const key = bytes(testCase.key);
  if (testCase.kind === "member") {
    const value = bytes(testCase.value);
    return verifyMembership(proof, specs.exist, root, key, value)
      && recordAgrees(testCase.check, value, testCase.answer);
  }
  return verifyNonMembership(proof, specs.nonexist, root, key);
}

function main() {
  const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const specs = {
    exist: ics23.ProofSpec.decode(bytes(input.specs.exist)),
    nonexist: ics23.ProofSpec.decode(bytes(input.specs.nonexist)),
  };
  const results = {};
  let failed = 0;
  for (const testCase of input.cases) {
    let accepted;
    try {
      accepted = run(testCase, specs);
    } catch (error) {
      accepted = false;
    }
    results[testCase.name] = accepted;
    if (accepted !== testCase.accept) failed += 1;
  }
  console.log(JSON.stringify({ results, failed }));
  process.exit(failed ? 1 : 0);
}

main();
