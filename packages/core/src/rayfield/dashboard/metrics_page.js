// The Metrics tab: one SVG chart per system metric, a line per node, the last hour.
// Data from /api/pages/metrics (rayfield/dashboard/metrics_page.py); text only in the DOM.
(function () {
  const svgNs = "http://www.w3.org/2000/svg";
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  const W = 480, H = 150, PAD_L = 64, PAD_B = 18;

  function svgEl(tag, attrs) {
    const node = document.createElementNS(svgNs, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  function label(value, unit, tools) {
    if (unit === "bytes") return tools.fmtBytes(Math.round(value));
    if (unit === "bytes/s") return tools.fmtBytes(Math.round(value)) + "/s";
    if (unit === "percent") return tools.fmtNum(value) + "%";
    return tools.fmtNum(value);
  }

  function chart(series, data, tools) {
    const t0 = data.now - data.window_s;
    let max = 0;
    for (const n of series.nodes) for (const [, v] of n.points) max = Math.max(max, v);
    if (series.unit === "percent") max = Math.max(max, 100);
    max = max > 0 ? max * 1.05 : 1;
    const svg = svgEl("svg", { width: W, height: H, class: "metrics-chart", "data-series": series.name });
    svg.append(svgEl("line", { x1: PAD_L, y1: H - PAD_B, x2: W, y2: H - PAD_B, stroke: "#999" }));
    svg.append(svgEl("line", { x1: PAD_L, y1: 0, x2: PAD_L, y2: H - PAD_B, stroke: "#999" }));
    const top = svgEl("text", { x: PAD_L - 4, y: 10, "text-anchor": "end", "font-size": 10 });
    top.textContent = label(max, series.unit, tools);
    svg.append(top);
    for (const [text, x, anchor] of [["-60 min", PAD_L, "start"], ["-30 min", (PAD_L + W) / 2, "middle"], ["now", W - 2, "end"]]) {
      const t = svgEl("text", { x, y: H - 4, "font-size": 10, "text-anchor": anchor });
      t.textContent = text;
      svg.append(t);
    }
    series.nodes.forEach((n, i) => {
      const pts = n.points.map(([t, v]) => {
        const x = PAD_L + ((t - t0) / data.window_s) * (W - PAD_L);
        const y = (H - PAD_B) * (1 - v / max);
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      const line = svgEl("polyline", { points: pts.join(" "), fill: "none", stroke: colors[i % colors.length], "stroke-width": 1.5, "data-node": n.node });
      const title = svgEl("title", {});
      const last = n.points.length ? n.points[n.points.length - 1][1] : null;
      title.textContent = `${n.node}: ${last === null ? "-" : label(last, series.unit, tools)}`;
      line.append(title);
      svg.append(line);
    });
    return svg;
  }

  async function refresh(section, tools) {
    const data = await tools.api(tools.dataUrl({}));
    const legend = tools.el("div", { class: "metrics-legend" });
    const nodes = data.series.length ? data.series[0].nodes : [];
    nodes.forEach((n, i) => {
      const swatch = tools.el("span", { class: "metrics-swatch" }, "\u25A0 ");
      swatch.style.color = colors[i % colors.length];
      legend.append(tools.el("span", { class: "metrics-node" }, swatch, n.node + "  "));
    });
    const cards = data.series.map((s) => {
      const last = s.nodes.map((n) => n.points.length ? n.points[n.points.length - 1][1] : 0);
      const now = last.length ? label(last.reduce((a, b) => a + b, 0), s.unit, tools) : "-";
      const card = tools.el("div", { class: "metrics-card", "data-series": s.name },
        tools.el("h3", {}, `${s.title} (now, all nodes: ${now})`), chart(s, data, tools));
      card.style.display = "inline-block"; // two or more charts a row (CSSOM: the CSP allows it)
      card.style.margin = "0 24px 16px 0";
      card.style.verticalAlign = "top";
      return card;
    });
    const note = tools.el("p", { class: "metrics-note" },
      `Sampled every ${data.interval_s} s from each node's /metrics; the last hour.`);
    section.replaceChildren(note, legend, ...cards);
  }

  window.rayfieldDashboard.addPage("metrics", refresh);
})();
