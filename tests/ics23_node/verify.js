// Checks Trolly's query proofs with @confio/ics23 (the ICS23 reference verifier for JavaScript) and no Trolly code.
//
// Usage: node verify.js CASES.json. The file holds the two proof specs (ProofSpec protobuf, base64) and cases,
// each a proof (CommitmentProof protobuf, base64) as a node's Query answered it, the app hash from the next
// block's header, the key and value to check, and whether @confio/ics23 must accept it. Records whose layout
// docs/protocol.md gives are also read here and compared with the JSON answer: an account's balance and nonce
// (two big-endian u64), a task's JSON record. Prints one JSON line of results; exits 1 if any case disagrees.
//
// A "listing" case is a whole answer with one ProofOp per state key it read (docs/protocol.md 4.7a): every
// proof must hold, the listing index record (key 05 || prefix) must be among them, each entry it names must
// have its own record proven, and the answer's rows must name exactly those entries, in order (their addresses,
// bech32, decoded here): an entry left out of the answer or of the proofs fails.
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

const BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l";

function bech32Bytes(address) {
  // The 20 bytes an address names: its 5-bit data words (checksum dropped) regrouped into 8-bit bytes.
  const data = address.slice(address.lastIndexOf("1") + 1, -6);
  let accumulator = 0;
  let bits = 0;
  const out = [];
  for (const char of data) {
    const value = BECH32.indexOf(char);
    if (value < 0) throw new Error(`not bech32: ${address}`);
    accumulator = (accumulator << 5) | value;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push((accumulator >> bits) & 0xff);
    }
  }
  return Buffer.from(out);
}

function opHolds(op, specs, root) {
  const proof = ics23.CommitmentProof.decode(bytes(op.data));
  const key = bytes(op.key);
  if (op.type === "ics23:trolly") {
    return verifyMembership(proof, specs.exist, root, key, proof.exist.value);
  }
  const hashed = Uint8Array.from(require("crypto").createHash("sha256").update(key).digest());
  return op.type === "ics23:trolly-hashed" && verifyNonMembership(proof, specs.nonexist, root, hashed);
}

function listingHolds(testCase, specs) {
  const root = Buffer.from(testCase.app_hash, "hex");
  const records = new Map();
  for (const op of testCase.ops) {
    if (!opHolds(op, specs, root)) return false;
    const proof = ics23.CommitmentProof.decode(bytes(op.data));
    records.set(Buffer.from(bytes(op.key)).toString("hex"), proof.exist ? Buffer.from(proof.exist.value) : null);
  }
  const prefix = Buffer.from(testCase.prefix, "base64");
  const index = records.get(Buffer.concat([Buffer.from([0x05]), prefix]).toString("hex"));
  const entries = [];
  for (let at = 0; index && at < index.length; at += testCase.entry_length) {
    entries.push(index.subarray(at, at + testCase.entry_length));
  }
  if (!entries.every((entry) => records.get(Buffer.concat([prefix, entry]).toString("hex")))) return false;
  const rows = testCase.rows;
  return rows.length === entries.length
    && rows.every((row, i) => bech32Bytes(row[testCase.address_field]).equals(entries[i]));
}

function run(testCase, specs) {
  if (testCase.kind === "listing") return listingHolds(testCase, specs);
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
