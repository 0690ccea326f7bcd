// One blob by its hash from the first of several base URLs that serves it: GET <url>/blobs/<sha256 hex>, the
// path every blob service and relay serves (compute/blobs/server.py), as compute/blobs/client.py fetches it.
// Every answer is hash-checked before it is returned, a body past `maxSize` is cut off while it streams, and a
// redirect is refused (as in Python: a blob service has no reason to send one elsewhere).
//
//   const bytes = await fetchBlob(["http://127.0.0.1:8600"], hex, {fetch, maxSize});   // Uint8Array

import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";
import { DatasetError } from "./data_errors.js";

/** Base URLs without trailing slashes, each once, in order. */
export function baseUrls(urls) {
  return [...new Set(urls.filter((url) => typeof url === "string" && url).map((url) => url.replace(/\/+$/, "")))];
}

async function readLimited(response, maxSize, url) {
  const declared = Number(response.headers.get("content-length"));
  if (declared > maxSize) throw new DatasetError(`${url}: ${declared} bytes exceeds the limit of ${maxSize}`);
  if (!response.body) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const pieces = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > maxSize) {
      await reader.cancel();
      throw new DatasetError(`${url}: body exceeds the limit of ${maxSize} bytes`);
    }
    pieces.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const piece of pieces) {
    bytes.set(piece, at);
    at += piece.length;
  }
  return bytes;
}

async function fetchFrom(base, digest, fetch, maxSize) {
  const url = `${base}/blobs/${digest}`;
  let response;
  try {
    response = await fetch(url, { redirect: "error" });
  } catch (error) {
    throw new DatasetError(`${url}: ${error.message}`);
  }
  if (response.status !== 200) throw new DatasetError(`${url}: HTTP ${response.status}`);
  const bytes = await readLimited(response, maxSize, url);
  const received = toHex(sha256(bytes));
  if (received !== digest) throw new DatasetError(`${url}: received bytes hash to ${received}`);
  return bytes;
}

/** The blob `digest` (64 lower-case hex digits) from the first of `urls` that serves it, hash-checked;
 * DatasetError naming every URL's failure when none does. */
export async function fetchBlob(urls, digest, { fetch = globalThis.fetch, maxSize }) {
  const bases = baseUrls(urls);
  if (!bases.length) throw new DatasetError(`blob ${digest.slice(0, 16)}... is not here and no URL serves it`);
  const failures = [];
  for (const base of bases) {
    try {
      return await fetchFrom(base, digest, fetch, maxSize);
    } catch (error) {
      if (!(error instanceof DatasetError)) throw error;
      failures.push(error.message);
    }
  }
  throw new DatasetError(`blob ${digest}: ${failures.join("; ")}`);
}
