// The chain's JSON answers read without losing an amount: Python writes every integer as a JSON number, and
// an amount may pass 2^53, beyond what a JS number holds exactly. Such an integer is read as its decimal
// string instead (JSON.parse would round it silently); integers that fit stay numbers. Whoever needs an exact
// amount takes BigInt(value), which is exact for both.

// A whole string token, or a number token: strings are matched first and kept whole, so digits inside them
// are never touched.
const TOKEN = /"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/g;

/** JSON.parse, except that integers beyond Number.MAX_SAFE_INTEGER come back as decimal strings. */
export function parseExactJson(text) {
  return JSON.parse(text.replace(TOKEN, (token) => {
    if (token.startsWith('"') || /[.eE]/.test(token) || Number.isSafeInteger(Number(token))) {
      return token;
    }
    return `"${token}"`;
  }));
}
