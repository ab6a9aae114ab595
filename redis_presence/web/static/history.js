// redis-presence dashboard: the charts, kept true and readable. Links and sparklines stay on
// the rows that dashboard.js re-renders from reads and events; a chart's values are told on
// hover and keyboard. Names reach the page through textContent and URLSearchParams only,
// never as markup. The SVG the server drew is the only copy of a chart's numbers: its
// points are (x, scale - count) over a viewBox in counts, read back here exactly.
"use strict";

(() => {
  const dataNode = document.getElementById("page-data");
  const page = dataNode ? JSON.parse(dataNode.textContent || "{}") : {};
  const root = page.root || "";
  const SVG = "http://www.w3.org/2000/svg";

  // A consumer row's name links to its page (rows dashboard.js builds have none).
  function linkConsumers(tbody) {
    for (const tr of tbody.rows) {
      const td = tr.querySelector("td.consumer");
      if (!td || td.querySelector("a") || !tr.dataset.key) continue;
      const [queue, group, consumer] = JSON.parse(tr.dataset.key);
      const params = new URLSearchParams({ queue, group, consumer });
      const a = document.createElement("a");
      a.href = `${root}/consumer?${params}`;
      a.textContent = td.textContent;
      td.replaceChildren(a);
    }
  }

  // -- a chart's numbers, read back from its drawing -------------------------------------
  const pairs = (text) => (text || "").trim().split(/\s+/).filter(Boolean)
    .map((p) => p.split(",").map(Number));
  function series(svg) {
    const scale = Number(svg.dataset.scale);
    const sure = pairs(svg.querySelector("polyline.sure").getAttribute("points"));
    const xs = sure.map(([x]) => x);
    const low = sure.map(([, y]) => scale - y);
    const band = svg.querySelector("polygon.maybe");
    const high = band
      ? pairs(band.getAttribute("points")).slice(0, xs.length).map(([, y]) => scale - y)
      : [...low];
    return { xs, low, high, scale };
  }
  const round3 = (n) => Math.round(n * 1000) / 1000;
  // Draw `s` on a scale of 0 to `scale`: the line in counts, every other y (the margins,
  // outages, marks) in proportion.
  function draw(svg, s, scale) {
    const k = scale / s.scale;
    if (k !== 1) {
      const box = svg.viewBox.baseVal;
      svg.setAttribute("viewBox", `${box.x} ${round3(box.y * k)} ${box.width} ${round3(box.height * k)}`);
      for (const el of svg.querySelectorAll("rect, line:not(.cursor)")) {
        for (const name of ["y", "y1", "y2"]) {
          const value = el.getAttribute(name);
          if (value !== null && !value.endsWith("%")) el.setAttribute(name, String(round3(Number(value) * k)));
        }
      }
    }
    const sure = s.xs.map((x, i) => `${x},${scale - s.low[i]}`);
    svg.querySelector("polyline.sure").setAttribute("points", sure.join(" "));
    const band = svg.querySelector("polygon.maybe");
    if (band) {
      const top = s.xs.map((x, i) => `${x},${scale - s.high[i]}`);
      band.setAttribute("points", [...top, ...sure.reverse()].join(" "));
    }
    svg.dataset.scale = String(scale);
  }

  // A chart's "now" is the page's: when the count the page shows changes (the group's
  // cards, a group's row), the chart's last point and its label follow. Returns its peak.
  const count = (node) => Number((node?.textContent || "").replace(/,/g, ""));
  function setNow(svg, now, scale) {
    if (!svg || !Number.isFinite(now)) return null;
    const s = series(svg);
    s.low[s.low.length - 1] = now;
    s.high[s.high.length - 1] = now;
    const peak = Math.max(...s.high);
    draw(svg, s, Math.max(scale ?? s.scale, peak));
    const title = svg.querySelector(":scope > title");
    title.textContent = title.textContent
      .replace(/[\d,]+ now, at most [\d,]+/, `${now} now, at most ${peak}`);
    return peak;
  }

  // -- the group page: its chart follows the active card, and tells its values ----------
  const activeCard = document.querySelector('#group-stats [data-total="active"] .n');
  const chart = document.querySelector("#active-chart svg");
  const top = document.querySelector("#active-chart .y-top");
  const details = document.querySelector("#active-chart details.chart-values");
  if (activeCard && chart) {
    const follow = () => {
      const peak = setNow(chart, count(activeCard), Number(chart.dataset.scale));
      if (peak === null) return;
      document.querySelector("#active-chart .chart-now").textContent = activeCard.textContent;
      document.querySelector("#active-chart .chart-peak").textContent = String(peak);
      if (top) top.textContent = Number(chart.dataset.scale).toLocaleString("en-US");
      fillTable();
    };
    new MutationObserver(follow).observe(activeCard, {
      childList: true,
      characterData: true,
      subtree: true,
    });
    follow();
  }

  function isoUtc(ns) {
    const seconds = Math.floor(Number(ns) / 1e9);
    return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  // What the chart says at its i-th instant: the time, the counts, and what happened in
  // the step that ends there (the marks' titles).
  function valueAt(svg, s, i) {
    const since = Number(svg.dataset.since);
    const now = Number(svg.dataset.now);
    const width = svg.viewBox.baseVal.width;
    const at = since + ((now - since) * s.xs[i]) / width;
    const low = s.low[i];
    const high = s.high[i];
    const parts = [`${isoUtc(at)}: ${low} active${high > low ? ` (maybe ${high})` : ""}`];
    if (i === s.xs.length - 1) parts[0] += " (now)";
    const previous = i > 0 ? s.xs[i - 1] : -Infinity;
    for (const mark of svg.querySelectorAll("line.ev, rect.outage, line.data-change")) {
      const x = Number(mark.getAttribute("x") ?? mark.getAttribute("x1"));
      const end = x + Number(mark.getAttribute("width") || 0);
      if ((mark.tagName === "rect" ? x <= s.xs[i] && s.xs[i] <= end : previous < x && x <= s.xs[i])) {
        parts.push(mark.querySelector("title").textContent);
      }
    }
    return { at, low, high, text: parts.join("; ") };
  }

  const readout = document.getElementById("chart-readout");
  if (chart && readout) {
    let index = null;
    const cursor = document.createElementNS(SVG, "line");
    cursor.setAttribute("class", "cursor");
    const show = (i) => {
      const s = series(chart);
      index = Math.min(Math.max(0, i), s.xs.length - 1);
      const box = chart.viewBox.baseVal;
      for (const [name, value] of [["x1", s.xs[index]], ["x2", s.xs[index]], ["y1", box.y], ["y2", box.y + box.height]]) {
        cursor.setAttribute(name, String(value));
      }
      if (!cursor.isConnected) chart.append(cursor);
      readout.textContent = valueAt(chart, s, index).text;
    };
    chart.addEventListener("pointermove", (event) => {
      const rect = chart.getBoundingClientRect();
      const s = series(chart);
      const x = ((event.clientX - rect.left) / rect.width) * chart.viewBox.baseVal.width;
      let best = 0;
      s.xs.forEach((value, i) => {
        if (Math.abs(value - x) < Math.abs(s.xs[best] - x)) best = i;
      });
      show(best);
    });
    chart.addEventListener("keydown", (event) => {
      const last = series(chart).xs.length - 1;
      const steps = { ArrowLeft: -1, ArrowRight: 1, ArrowDown: -1, ArrowUp: 1, PageDown: -10, PageUp: 10 };
      if (event.key in steps) show((index ?? last) + steps[event.key]);
      else if (event.key === "Home") show(0);
      else if (event.key === "End") show(last);
      else return;
      event.preventDefault();
    });
    chart.addEventListener("focus", () => show(index ?? series(chart).xs.length - 1));
  }

  // The chart's values as a table, built when it is opened (not a second copy in the page).
  function fillTable() {
    if (!details || !details.open || !chart) return;
    const s = series(chart);
    const table = document.createElement("table");
    table.className = "chart-table";
    const head = table.createTHead().insertRow();
    for (const label of ["When (UTC)", "Active", "Maybe active", "Meanwhile"]) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = label;
      head.append(th);
    }
    const body = table.createTBody();
    s.xs.forEach((_, i) => {
      const v = valueAt(chart, s, i);
      const tr = body.insertRow();
      const notes = v.text.split("; ").slice(1).join("; ");
      for (const [text, cls] of [[isoUtc(v.at), "when"], [String(v.low), "num"], [String(v.high), "num"], [notes, ""]]) {
        const td = tr.insertCell();
        td.textContent = text;
        if (cls) td.className = cls;
      }
    });
    const old = details.querySelector("table");
    if (old) old.replaceWith(table);
    else details.append(table);
  }
  if (details) details.addEventListener("toggle", fillTable);

  // -- the groups page: a sparkline on every row, one scale for all ---------------------
  // The cells the server drew are kept here (not as a second copy in the page) and put back
  // on the rows dashboard.js re-renders; when a row's count now passes the scale, every
  // sparkline is redrawn on the new one.
  const sparks = new Map();
  const scaleNode = document.getElementById("spark-scale");
  let sparkScale = 0;
  for (const td of document.querySelectorAll("#groups tbody td.spark")) {
    sparks.set(JSON.stringify(JSON.parse(td.dataset.key)), td); // one spelling of the key
    const svg = td.querySelector("svg");
    if (svg) sparkScale = Math.max(sparkScale, Number(svg.dataset.scale));
  }
  function rescale(scale) {
    sparkScale = scale;
    for (const td of sparks.values()) {
      const svg = td.querySelector("svg");
      if (svg && Number(svg.dataset.scale) !== scale) draw(svg, series(svg), scale);
    }
    if (scaleNode) scaleNode.textContent = scale.toLocaleString("en-US");
  }
  function sparkGroups(tbody) {
    for (const tr of tbody.rows) {
      if (tr.querySelector("td.spark") || tr.dataset.queue === undefined) continue;
      const key = JSON.stringify([tr.dataset.queue, tr.dataset.group]);
      const kept = sparks.get(key);
      if (kept) {
        const cell = kept.isConnected ? kept.cloneNode(true) : kept;
        sparks.set(key, cell);
        tr.append(cell);
        const svg = cell.querySelector("svg");
        const peak = setNow(svg, count(tr.querySelector("td.num.active")), sparkScale);
        if (peak !== null && peak > sparkScale) rescale(peak);
      } else {
        const td = document.createElement("td");
        td.className = "spark";
        const span = document.createElement("span");
        span.className = "no-spark";
        span.title = "not drawn: reload the page for this group's sparkline";
        span.textContent = "–";
        td.append(span);
        tr.append(td);
      }
    }
  }

  function keep(selector, fix) {
    const tbody = document.querySelector(selector);
    if (!tbody) return;
    fix(tbody);
    new MutationObserver(() => fix(tbody)).observe(tbody, { childList: true });
  }
  keep("#consumers tbody", linkConsumers);
  keep("#groups tbody", sparkGroups);
})();
