// The Wallet page: the keyring's keys with their balances, delegations and pending rewards (updated live), and
// send, stake, unbond, delegate, undelegate or withdraw rewards with the CLI's confirmation: a preview of the
// transaction (fee and total spend included), then the password and "Sign and broadcast", or Cancel.
import { getJson } from "../api.js";
import { signingFlow } from "../confirm.js";
import { field, h, mono, table, utrl } from "../dom.js";

const ACTIONS = [["send", "Send tokens"], ["stake", "Stake (bond to your validator)"], ["unbond", "Unbond stake"],
  ["delegate", "Delegate to a validator"], ["undelegate", "Undelegate from a validator"],
  ["withdraw", "Withdraw rewards from a validator"]];
const NAMES_VALIDATOR = ["delegate", "undelegate", "withdraw"];

export async function walletPage() {
  const data = await getJson("/api/wallet");
  const holdings = h("div", { id: "balances" }, keyTables(data.keys));
  const action = h("select", { name: "action" }, ACTIONS.map(([value, words]) => h("option", { value }, words)));
  const key = h("select", { name: "key" }, data.keys.map((k) => h("option", { value: k.name }, k.name)));
  const validator = h("select", { name: "validator" }, data.validators.map((v) => h("option", { value: v.operator },
    `${v.moniker} (${v.operator})${v.jailed ? ", jailed" : ""}`)));
  const to = h("input", { type: "text", name: "to", autocomplete: "off", spellcheck: "false" });
  const amount = h("input", { type: "text", name: "amount", autocomplete: "off", inputmode: "decimal" });
  const toField = field("to", "Recipient (an address or a key name)", to);
  const validatorField = field("validator", "Validator", validator);
  const amountField = field("amount", "Amount", amount, "e.g. 1.5trl or 1500000utrl");
  const review = h("div", { id: "review", "aria-live": "polite" });
  const outcome = h("div", { id: "wallet-outcome", role: "status", "aria-live": "polite" });
  const showFields = () => {
    toField.hidden = action.value !== "send";
    validatorField.hidden = !NAMES_VALIDATOR.includes(action.value);
    amountField.hidden = action.value === "withdraw";
  };
  showFields();
  action.addEventListener("change", () => { showFields(); review.replaceChildren(); });

  const request = () => ({ action: action.value, key: key.value, to: to.value, amount: amount.value,
    validator: validator.value });
  const describe = (m) => `${m.type.split(".").pop()} ${Object.entries(m.fields)
    .map(([name, value]) => `${name}=${["amount", "stake"].includes(name) ? utrl(value) : value}`).join(", ")}`;
  const refresh = async () => holdings.replaceChildren(...keyTables((await getJson("/api/wallet")).keys));
  const start = signingFlow({ api: "/api/wallet", review, outcome, describe, passwordId: "wallet-password",
    fields: { to: "to", amount: "amount", key: "key", action: "action", validator: "validator" }, sent: refresh });
  const preview = (event) => { event.preventDefault(); start(request()); };

  const form = h("form", { id: "wallet-form", novalidate: true, onsubmit: preview },
    h("fieldset", {}, h("legend", {}, "Send, stake, unbond, delegate, undelegate or withdraw rewards"),
      field("action", "Action", action), field("key", "Key that signs", key), toField, validatorField, amountField,
      h("button", { type: "submit" }, "Review")));
  return {
    page: [h("h1", {}, "Wallet"), h("p", {}, `Keys of this computer's ${data.keyring_backend} keyring; no key `,
      "ever leaves it."), holdings, form, review, outcome],
    static: true,
    live: refresh,
  };
}

function keyTables(keys) {
  const delegations = keys.flatMap((k) => k.delegations.delegations.map((d) => [k.name, mono(d.validator),
    utrl(d.amount), utrl((k.rewards.rewards.find((r) => r.validator === d.validator) || { amount: 0 }).amount)]));
  return [
    table("Balances", ["key", "address", "balance", "validator stake", "delegated", "pending rewards", "proof"],
      keys.map((k) => [k.name, mono(k.address), utrl(k.balance),
        k.validator ? `${utrl(k.validator.stake)} (power ${k.validator.power})` : "not a validator",
        utrl(k.delegations.total), utrl(k.rewards.total), `balance ${k.proof.note}; delegations `
          + `${k.delegations.proof.note}; rewards ${k.rewards.proof.note}`]), "the keyring has no key yet."),
    table("Delegations", ["key", "validator", "delegated", "pending rewards"], delegations,
      "no key of this keyring delegates yet."),
  ];
}
