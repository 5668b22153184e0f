// rayfield-tune's dashboard page: the experiments Tune drivers published to this cluster,
// their trials' states and a plot of each trial's metric against time, redrawn every
// refresh. Data goes into the page as text only (tools.el), never as HTML.
"use strict";
(() => {
  const COLORS = ["#3d6fd8", "#d8553d", "#1b7f3b", "#8a5ad8", "#c9a227", "#2aa7b8",
    "#b3261e", "#6b8e23", "#d63d8f", "#555f73"];
  const SVG = "http://www.w3.org/2000/svg";
  let chosen = ""; // the experiment id picked in the list ("" = the newest)

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function build(section, t) {
    const select = t.el("select", { id: "tune-experiment" });
    select.addEventListener("change", () => { chosen = select.value; });
    section.replaceChildren(
      t.el("p", {}, t.el("label", {}, "Experiment ", select)),
      t.el("div", { id: "tune-summary" }),
      t.el("div", { id: "tune-plot" }),
      t.el("table", { id: "tune-trials" }, t.el("thead", {}, t.el("tr", {},
        t.el("th", {}, "Trial"), t.el("th", {}, "Status"), t.el("th", {}, "Iteration"),
        t.el("th", { id: "tune-metric" }, "Metric"), t.el("th", {}, "Config"),
        t.el("th", {}, "Error"))), t.el("tbody")));
    section.dataset.built = "1";
  }

  function fillExperiments(select, experiments, current, t) {
    const options = experiments.map((e) => t.el("option", { value: e.id },
      `${e.name} (${e.total} trials${e.finished ? ", finished" : ""}) · ${new Date(e.updated_s * 1000).toLocaleTimeString()}`));
    select.replaceChildren(...options);
    if (current) select.value = current;
  }

  function summarize(box, exp, t) {
    const parts = [t.el("span", { class: "c-name" }, exp.name), ` · ${exp.total} trials`];
    for (const state of Object.keys(exp.counts).sort()) {
      parts.push(" · ", t.el("span", { class: `count state-${state}`, "data-state": state }, exp.counts[state]), ` ${state}`);
    }
    if (exp.best) parts.push(` · best ${exp.metric} ${t.fmtNum(exp.best.value)} (${exp.best.name})`);
    parts.push(exp.finished ? " · finished" : " · running");
    box.replaceChildren(...parts);
  }

  function plot(box, exp, colorOf) {
    const lines = exp.trials.filter((tr) => tr.points.length > 0);
    if (lines.length === 0) {
      box.replaceChildren(document.createTextNode(`No ${exp.metric || "metric"} reported yet.`));
      return;
    }
    const all = lines.flatMap((tr) => tr.points);
    const tMax = Math.max(...all.map((p) => p[0]), 1e-3);
    let lo = Math.min(...all.map((p) => p[1])), hi = Math.max(...all.map((p) => p[1]));
    if (hi === lo) { hi += 1; lo -= 1; }
    const W = 900, H = 300, L = 70, R = 20, T = 10, B = 30;
    const x = (s) => L + (s / tMax) * (W - L - R);
    const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    const svg = svgEl("svg", { width: W, height: H, id: "tune-chart" });
    svg.append(svgEl("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#999" }));
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#999" }));
    svg.append(svgEl("text", { x: 2, y: T + 10, "font-size": 11, class: "y-max" }, String(Number(hi.toPrecision(4)))));
    svg.append(svgEl("text", { x: 2, y: H - B, "font-size": 11, class: "y-min" }, String(Number(lo.toPrecision(4)))));
    svg.append(svgEl("text", { x: W - R - 120, y: H - 8, "font-size": 11, class: "x-max" }, `${tMax.toFixed(1)} s`));
    svg.append(svgEl("text", { x: L + 4, y: H - 8, "font-size": 11 }, `${exp.metric} against time since the start`));
    for (const tr of lines) {
      const points = tr.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      const line = svgEl("polyline", {
        class: "trial-line", points, fill: "none", stroke: colorOf(tr.id), "stroke-width": 1.5,
        "data-trial": tr.id, "data-points": tr.points.length,
      });
      line.append(svgEl("title", {}, tr.name));
      svg.append(line);
      const [lastT, lastV] = tr.points[tr.points.length - 1];
      svg.append(svgEl("circle", { cx: x(lastT), cy: y(lastV), r: 2.5, fill: colorOf(tr.id) }));
    }
    box.replaceChildren(svg);
  }

  function table(section, exp, colorOf, t) {
    document.getElementById("tune-metric").textContent = exp.metric || "Metric";
    const rows = exp.trials.map((tr) => {
      const swatch = t.el("i", { class: "swatch" });
      swatch.style.background = colorOf(tr.id);
      return t.el("tr", { "data-trial": tr.id },
        t.el("td", { class: "c-name" }, swatch, tr.name),
        t.el("td", { class: `c-status state-${tr.status}` }, tr.status),
        t.el("td", { class: "c-iteration" }, tr.iteration ?? ""),
        t.el("td", { class: "c-value" }, tr.value === null ? "" : t.fmtNum(tr.value)),
        t.el("td", { class: "c-config" }, tr.config),
        t.el("td", { class: "c-error" }, tr.error));
    });
    section.querySelector("#tune-trials tbody").replaceChildren(...rows);
  }

  rayfieldDashboard.addPage("tune", async (section, t) => {
    const data = await t.api(t.dataUrl(chosen ? { experiment: chosen } : {}));
    if (!section.dataset.built) build(section, t);
    const exp = data.experiment;
    fillExperiments(section.querySelector("#tune-experiment"), data.experiments, exp && exp.id, t);
    if (!exp) {
      section.querySelector("#tune-summary").textContent =
        "No Tune experiment has published to this cluster yet: run tune.run() or Tuner.fit() on a driver connected to it.";
      section.querySelector("#tune-plot").replaceChildren();
      section.querySelector("#tune-trials tbody").replaceChildren();
      return;
    }
    const index = new Map(exp.trials.map((tr, i) => [tr.id, i]));
    const colorOf = (id) => COLORS[(index.get(id) ?? 0) % COLORS.length];
    summarize(section.querySelector("#tune-summary"), exp, t);
    plot(section.querySelector("#tune-plot"), exp, colorOf);
    table(section, exp, colorOf, t);
  });
})();
