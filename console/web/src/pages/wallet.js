// The Wallet page: the keyring's keys with their balances (updated live), and send, stake or unbond with the
// CLI's confirmation: a preview of the transaction (fee and total spend included), then the password and
// "Sign and broadcast", or Cancel.
import { getJson, postJson } from "../api.js";
import { facts, field, h, mono, notice, showFieldError, table, utrl } from "../dom.js";

export async function walletPage() {
  const data = await getJson("/api/wallet");
  const balances = h("div", { id: "balances" }, balanceTable(data.keys));
  const action = h("select", { name: "action" }, h("option", { value: "send" }, "Send tokens"),
    h("option", { value: "stake" }, "Stake (bond to your validator)"), h("option", { value: "unbond" }, "Unbond stake"));
  const key = h("select", { name: "key" }, data.keys.map((k) => h("option", { value: k.name }, k.name)));
  const to = h("input", { type: "text", name: "to", autocomplete: "off", spellcheck: "false" });
  const amount = h("input", { type: "text", name: "amount", autocomplete: "off", inputmode: "decimal" });
  const toField = field("to", "Recipient (an address or a key name)", to);
  const review = h("div", { id: "review", "aria-live": "polite" });
  const outcome = h("div", { id: "wallet-outcome", role: "status", "aria-live": "polite" });
  action.addEventListener("change", () => { toField.hidden = action.value !== "send"; review.replaceChildren(); });

  const request = () => ({ action: action.value, key: key.value, to: to.value, amount: amount.value });
  const clear = () => { for (const id of ["to", "amount", "key", "action", "wallet-password"]) showFieldError(id, ""); };
  const refusal = (error, fallback) => {
    const id = { to: "to", amount: "amount", key: "key", action: "action", password: "wallet-password" }[
      error.body && error.body.field] || fallback;
    if (!showFieldError(id, error.message)) outcome.replaceChildren(notice(error.message, "error"));
  };

  async function preview(event) {
    event.preventDefault();
    clear();
    outcome.replaceChildren();
    try {
      const answer = await postJson("/api/wallet/preview", request());
      showReview(answer.tx, request());
    } catch (error) {
      review.replaceChildren();
      refusal(error, "amount");
    }
  }

  function showReview(tx, asked) {
    const password = h("input", { type: "password", autocomplete: "current-password" });
    const sign = h("button", { type: "button", onclick: () => confirm(asked, password) }, "Sign and broadcast");
    const cancel = h("button", { type: "button", onclick: () => { review.replaceChildren(); outcome.replaceChildren(
      notice("Cancelled: nothing was signed.")); } }, "Cancel");
    review.replaceChildren(h("section", { "aria-labelledby": "review-title", class: "review" },
      h("h2", { id: "review-title" }, "Confirm this transaction"),
      facts([["signer", mono(tx.signer)], ["chain", tx.chain_id], ["nonce", String(tx.nonce)], ["fee", utrl(tx.fee)],
        ...tx.messages.map((m, i) => [`message ${i + 1}`, `${m.type.split(".").pop()} ${Object.entries(m.fields)
          .map(([name, value]) => `${name}=${["amount", "stake"].includes(name) ? utrl(value) : value}`).join(", ")}`]),
        ["total spend", utrl(tx.total_spend)]]),
      field("wallet-password", "Keyring password (used once to sign, never stored)", password), sign, " ", cancel));
    password.focus();
  }

  async function confirm(asked, password) {
    clear();
    try {
      const sent = await postJson("/api/wallet/sign", { ...asked, password: password.value, confirmed: true });
      review.replaceChildren();
      outcome.replaceChildren(notice(`Included in block ${sent.height} (transaction ${sent.hash}).`));
      balances.replaceChildren(balanceTable((await getJson("/api/wallet")).keys));
    } catch (error) {
      password.value = "";
      refusal(error, "wallet-password");
    }
  }

  const form = h("form", { id: "wallet-form", novalidate: true, onsubmit: preview },
    h("fieldset", {}, h("legend", {}, "Send, stake or unbond"),
      field("action", "Action", action), field("key", "Key that signs", key), toField,
      field("amount", "Amount", amount, "e.g. 1.5trl or 1500000utrl"),
      h("button", { type: "submit" }, "Review")));
  return {
    page: [h("h1", {}, "Wallet"), h("p", {}, `Keys of this computer's ${data.keyring_backend} keyring; no key `,
      "ever leaves it."), balances, form, review, outcome],
    static: true,
    live: async () => balances.replaceChildren(balanceTable((await getJson("/api/wallet")).keys)),
  };
}

function balanceTable(keys) {
  return table("Balances", ["key", "address", "balance", "validator stake"], keys.map((k) => [k.name, mono(k.address),
    utrl(k.balance), k.validator ? `${utrl(k.validator.stake)} (power ${k.validator.power})` : "not a validator"]),
    "the keyring has no key yet.");
}
