// DOM building blocks shared by the pages. Everything is built with DOM calls (never innerHTML), so nothing the
// chain or a file says is read as markup.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const utrl = (amount) =>
  `${(Number(amount) / 1e6).toLocaleString("en", { maximumFractionDigits: 6 })} TRL`;
export const short = (text, n = 12) => (text && text.length > n + 3 ? `${text.slice(0, n)}…` : text || "–");
export const link = (href, text) => h("a", { href }, text);
export const yesNo = (flag) => (flag ? "yes" : "no");
export const mono = (text) => h("span", { class: "mono" }, text);

export function table(caption, headers, rows, empty = "None.") {
  if (!rows.length) return h("p", {}, `${caption}: ${empty}`);
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell))))));
}

export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

// A labelled control with a place for its refusal right beside it (aria-describedby), so a message is read
// out with the field and shown next to it, in words (never by colour alone).
export function field(id, label, control, hint = "") {
  const error = h("p", { id: `${id}-error`, class: "field-error", role: "alert", hidden: true });
  const hintNode = hint ? h("p", { id: `${id}-hint`, class: "hint" }, hint) : null;
  control.id = id;
  control.setAttribute("aria-describedby", [hint ? `${id}-hint` : "", `${id}-error`].join(" ").trim());
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hintNode, error);
}

export function showFieldError(id, message) {
  const error = document.getElementById(`${id}-error`);
  const control = document.getElementById(id);
  if (!error) return false;
  error.hidden = !message;
  error.textContent = message ? `Problem: ${message}` : "";
  if (control) {
    if (message) control.setAttribute("aria-invalid", "true"); else control.removeAttribute("aria-invalid");
  }
  return true;
}

export function notice(text, kind = "info") {
  return h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}
