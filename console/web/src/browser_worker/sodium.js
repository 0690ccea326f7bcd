// libsodium for the browser worker, ready: the one place that awaits the library's `ready` promise (its
// WebAssembly or asm.js build loads asynchronously), so each module asks for the instance rather than racing it.
//
//   const sodium = await sodiumReady();

import sodium from "libsodium-wrappers-sumo";

/** The libsodium instance, once it has loaded. */
export async function sodiumReady() {
  await sodium.ready;
  return sodium;
}
