// The Wallet page: the keyring's keys with their balances (updated live), and send, stake or unbond with the
// CLI's confirmation: a preview of the transaction (fee and total spend included), then the password and
// "Sign and broadcast", or Cancel.
import { getJson } from "../api.js";
import { signingFlow } from "../confirm.js";
import { field, h, mono, table, utrl } from "../dom.js";

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
  const describe = (m) => `${m.type.split(".").pop()} ${Object.entries(m.fields)
    .map(([name, value]) => `${name}=${["amount", "stake"].includes(name) ? utrl(value) : value}`).join(", ")}`;
  const start = signingFlow({ api: "/api/wallet", review, outcome, describe, passwordId: "wallet-password",
    fields: { to: "to", amount: "amount", key: "key", action: "action" },
    sent: async () => balances.replaceChildren(balanceTable((await getJson("/api/wallet")).keys)) });
  const preview = (event) => { event.preventDefault(); start(request()); };

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
