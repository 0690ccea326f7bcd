// The worker key of the page: created or imported, kept in localStorage only sealed under the tab's password
// (keystore.js), opened with it. Never sent anywhere: the page signs with it in the tab.
//
//   const stored = storedKey(localStorage);             // {address} or null
//   const key = await unlockKey(localStorage, password);

import { generateKey } from "./keys.js";
import { importArmoredKey, openFromStorage, sealForStorage, storedAddress } from "./keystore.js";

export const STORAGE_ITEM = "trolly-browser-worker-key";

/** {address} of the key this browser keeps, or null. */
export function storedKey(storage) {
  const json = storage.getItem(STORAGE_ITEM);
  return json === null ? null : { address: storedAddress(json) };
}

export async function unlockKey(storage, password) {
  return openFromStorage(storage.getItem(STORAGE_ITEM), password);
}

async function keep(storage, key, password) {
  storage.setItem(STORAGE_ITEM, await sealForStorage(key, password)); // sealed first: nothing half-stored
  return key;
}

export async function createKey(storage, password) {
  return keep(storage, await generateKey(), password);
}

/** A wallet armor (`trolly-wallet keys export`), opened with its password, kept under the page's one. */
export async function importKey(storage, armorText, armorPassword, password) {
  return keep(storage, await importArmoredKey(armorText, armorPassword), password);
}

export function forgetKey(storage) {
  storage.removeItem(STORAGE_ITEM);
}
