// The browser worker's key files for test_bw_key_files.py: reads {armors: [{text, password}], storage:
// {seed, password, wrongPassword}, stored: [{json, password}]} on stdin; answers what importArmoredKey,
// sealForStorage and openFromStorage give (an address, or the error's name and message) as JSON.
import { fromHex } from "../../../console/web/src/browser_worker/bytes_text.js";
import { keyFromSeed } from "../../../console/web/src/browser_worker/keys.js";
import {
  importArmoredKey, openFromStorage, sealForStorage, storedAddress,
} from "../../../console/web/src/browser_worker/keystore.js";

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => { text += chunk; }).on("end", () => resolve(text));
}));

async function outcome(action) {
  try {
    const key = await action();
    return { address: key.address };
  } catch (error) {
    return { error: error.name, message: error.message };
  }
}

const armors = [];
for (const { text, password } of input.armors) {
  armors.push(await outcome(() => importArmoredKey(text, password)));
}

const key = await keyFromSeed(fromHex(input.storage.seed));
const sealed = await sealForStorage(key, input.storage.password);
const storage = {
  sealed,
  claimed: storedAddress(sealed),
  right: await outcome(() => openFromStorage(sealed, input.storage.password)),
  wrong: await outcome(() => openFromStorage(sealed, input.storage.wrongPassword)),
  short: await outcome(() => sealForStorage(key, "short")),
};
const stored = [];
for (const { json, password } of input.stored) {
  stored.push(await outcome(() => openFromStorage(json, password)));
}
process.stdout.write(JSON.stringify({ armors, storage, stored }));
