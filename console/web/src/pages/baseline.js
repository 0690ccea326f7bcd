// The task page's score beside a baseline: the model's held-out score (the chart's last point) next to a
// baseline the console fitted on this computer on the same split and preprocessing (`console/baselines.py`),
// so a requester sees at once whether the network beat what they could have had alone. Shown only where the
// console holds the task's data and its requester library fits baselines.
import { h, table } from "../dom.js";

export function baselineSection(chart) {
  const baseline = chart.baseline;
  if (!baseline) return null;
  return h("section", { id: "baseline", "aria-labelledby": "baseline-title" },
    h("h2", { id: "baseline-title" }, "Held-out score beside a baseline"),
    baseline.problem ? h("p", {}, baseline.problem) : comparison(chart, baseline));
}

function comparison(chart, baseline) {
  const last = chart.points[chart.points.length - 1];
  const ours = last && typeof last[baseline.metric] === "number" ? last[baseline.metric] : null;
  const which = !last ? "the network's model" : chart.state === "done" ? `the network's model (W_${last.round}, final)`
    : `the latest evaluated weights (W_${last.round})`;
  const rows = [[which, ours === null ? "not evaluated yet" : ours.toFixed(4), "trained by the task's workers"],
    [`baseline: ${baseline.baseline_name}`, baseline.baseline.toFixed(4),
      `fitted on this computer in ${baseline.seconds.toFixed(1)} s on the same split and preprocessing`]];
  const gap = ours === null ? null : ours - baseline.baseline;
  return [table(`Held-out ${baseline.metric}: the model and the baseline`, ["model", `held-out ${baseline.metric}`, "how"],
    rows),
  h("p", { id: "baseline-gap" }, gap === null ? "The model is compared once its weights are evaluated."
    : `Model minus baseline: ${gap >= 0 ? "+" : ""}${gap.toFixed(4)} (${gap >= 0
      ? "the network's model is at least as good as the baseline" : "the baseline is better so far"}).`)];
}
