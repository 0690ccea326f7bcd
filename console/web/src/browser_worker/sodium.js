// libsodium (the sumo build: ed25519, argon2id, secretbox, sealed boxes, sha256), made ready in one place.
// Every module of the browser worker that needs it awaits `sodiumReady()` instead of `sodium.ready` itself, so
// the WebAssembly of libsodium is instantiated once per page or Node process, whoever asks first.
import sodium from "libsodium-wrappers-sumo";

let ready = null;

/** The libsodium instance, once its WebAssembly is ready. */
export function sodiumReady() {
  ready ??= sodium.ready.then(() => sodium);
  return ready;
}
