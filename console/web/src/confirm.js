// The CLI's confirmation step for a page's transactions (the Wallet's and the Governance pages'): "Review" asks the console for the
// transaction as it would be signed (signer, nonce, fee, what each message does, total spend) and shows it; then
// the keyring password and "Sign and broadcast", or Cancel. A refusal is shown beside the form field it concerns;
// one that concerns no field (the chain's own, with its code and log) in the outcome.
import { postJson } from "./api.js";
import { facts, field, h, mono, notice, showFieldError, utrl } from "./dom.js";

// `api`: the path the preview and sign routes hang off; `review`, `outcome`: the page's places for the preview and
// for what happened (each with an id); `fields`: the API's field names -> the ids of the form's controls;
// `describe(message)`: a message in words; `sent(result)`: what to show and refresh once it is in a block;
// `passwordId`: the id of the password field (the review's id and "-password" when not given).
// Returns `start(request)`, which shows the preview of `request`.
export function signingFlow({ api, review, outcome, fields, describe, sent, passwordId = `${review.id}-password` }) {
  const clear = () => { for (const id of [...Object.values(fields), passwordId]) showFieldError(id, ""); };
  const refuse = (error) => {
    const name = error.body && error.body.field;
    const id = name === "password" ? passwordId : fields[name];
    if (!id || !showFieldError(id, error.message)) outcome.replaceChildren(notice(error.message, "error"));
  };

  async function start(request) {
    clear();
    outcome.replaceChildren();
    try {
      show((await postJson(`${api}/preview`, request)).tx, request);
    } catch (error) {
      review.replaceChildren();
      refuse(error);
    }
  }

  function show(tx, request) {
    const password = h("input", { type: "password", autocomplete: "current-password" });
    const sign = h("button", { type: "button", onclick: () => confirm(request, password) }, "Sign and broadcast");
    const cancel = h("button", { type: "button", onclick: () => { review.replaceChildren(); outcome.replaceChildren(
      notice("Cancelled: nothing was signed.")); } }, "Cancel");
    review.replaceChildren(h("section", { "aria-labelledby": `${review.id}-title`, class: "review" },
      h("h2", { id: `${review.id}-title` }, "Confirm this transaction"),
      facts([["signer", mono(tx.signer)], ["chain", tx.chain_id], ["nonce", String(tx.nonce)], ["fee", utrl(tx.fee)],
        ...tx.messages.map((m, i) => [`message ${i + 1}`, describe(m)]), ["total spend", utrl(tx.total_spend)]]),
      field(passwordId, "Keyring password (used once to sign, never stored)", password), sign, " ", cancel));
    password.focus();
  }

  async function confirm(request, password) {
    clear();
    try {
      const result = await postJson(`${api}/sign`, { ...request, password: password.value, confirmed: true });
      review.replaceChildren();
      outcome.replaceChildren(notice(`Included in block ${result.height} (transaction ${result.hash}).`));
      await sent(result);
    } catch (error) {
      password.value = "";
      if (!(error.body && error.body.field === "password")) review.replaceChildren(); // nothing more to sign
      refuse(error);
    }
  }

  return start;
}
