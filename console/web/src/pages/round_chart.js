// The task page's chart: held-out loss (solid line, left axis) and accuracy (dashed line, right axis) of W_r.
// Told apart by line style and labels, not by colour alone; the same numbers are in the table beside it.
import uPlot from "uplot";

export function drawRoundChart(target, points) {
  if (points.length < 1) return;
  const regression = points[0].accuracy === null; // a number predicted: its loss alone (no accuracy)
  const options = {
    width: Math.min(640, target.clientWidth || 640), height: 220, legend: { live: false },
    scales: { x: { time: false }, loss: {}, accuracy: { range: [0, 1] } },
    axes: [{ label: "W_r: the weights after r verified rounds", incrs: [1] }, { scale: "loss", label: "loss" },
      { scale: "accuracy", side: 1, label: "accuracy", grid: { show: false } }],
    series: [{ label: "W_r" },
      { label: "held-out loss", scale: "loss", stroke: "#1b1b1b", width: 2, points: { show: true } },
      { label: "held-out accuracy", scale: "accuracy", stroke: "#0b57d0", width: 2, dash: [6, 4],
        points: { show: true } }],
  };
  if (regression) { options.axes.pop(); options.series.pop(); }
  const series = [points.map((p) => p.round), points.map((p) => p.loss)];
  new uPlot(options, regression ? series : [...series, points.map((p) => p.accuracy)], target);
}
