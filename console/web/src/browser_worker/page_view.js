// What the browser worker's page shows: small functions over the elements of worker.html, so page.js reads as
// what happens, not how it is drawn. A message is text only (textContent), whatever a node or relay answered.

export const $ = (id) => document.getElementById(id);

/** The page's one message: an error (`role=alert`) or, with `info`, a notice; '' hides it. */
export function showMessage(text, info = false) {
  const box = $("message");
  box.textContent = text;
  box.className = info ? "info" : "";
  box.hidden = text === "";
}

export function show(id, visible = true) {
  $(id).hidden = !visible;
}

export function setText(id, text) {
  $(id).textContent = text;
}

export function log(text) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  const list = $("work-log");
  list.append(item);
  list.scrollTop = list.scrollHeight;
}

export function progress(done, total, label) {
  const bar = $("segment-progress");
  bar.max = Math.max(total, 1);
  bar.value = done;
  setText("segment-label", label);
}

/** The task table: one row per live task, a Join button on each (`onJoin(id)`), a tab's reason beside it. */
export function renderTasks(tasks, onJoin) {
  const rows = tasks.map((task) => {
    const row = document.createElement("tr");
    row.dataset.task = String(task.id);
    const cells = [`#${task.id}`, task.status, `${task.workers_joined} of ${task.workers_wanted}`,
      `${task.collateral} utrl`, `${task.reward_per_round} utrl`, task.kernels.join(", ") || "?"];
    for (const text of cells) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.append(cell);
    }
    const action = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Join and train";
    button.addEventListener("click", () => onJoin(task.id));
    action.append(button);
    if (!task.wasm32) {
      const why = document.createElement("span");
      why.className = "unfit";
      why.textContent = " not for browsers (no wasm32)";
      action.append(why);
    }
    row.append(action);
    return row;
  });
  $("task-rows").replaceChildren(...rows);
}

/** The member's record at the end of a task: what it was paid, slashed and penalized. */
export function renderEarnings({ reason, member, finalWeightsHash }) {
  show("earnings");
  setText("earn-outcome", reason);
  setText("earn-paid", member ? `${member.paid} utrl` : "—");
  setText("earn-rounds", member ? String(member.rounds_passed) : "—");
  setText("earn-slashed", member ? `${member.slashed} utrl` : "—");
  setText("earn-penalized", member ? `${member.penalized} utrl` : "—");
  setText("earn-final", finalWeightsHash || "—");
}
