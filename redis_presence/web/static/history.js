// redis-presence dashboard: links and sparklines kept on the rows that dashboard.js
// re-renders from reads and events. Names reach the page through textContent and
// URLSearchParams only, never as markup; sparklines are moved from the server-rendered
// <template id="sparklines"> (SVG drawn by the server), never built from strings.
"use strict";

(() => {
  const dataNode = document.getElementById("page-data");
  const page = dataNode ? JSON.parse(dataNode.textContent || "{}") : {};
  const root = page.root || "";

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

  // A chart's "now" is the page's: when the count the page shows changes (the group's
  // cards, a group's row), the chart's last point, its label and its caption follow, drawn
  // again from the series' numbers the server put on it (data-xs, data-low, data-high).
  const count = (node) => Number((node?.textContent || "").replace(/,/g, ""));
  function setNow(svg, now) {
    if (!svg || !svg.dataset.xs || !Number.isFinite(now)) return null;
    const xs = svg.dataset.xs.split(" ").map(Number);
    const low = svg.dataset.low.split(" ").map(Number);
    const high = svg.dataset.high.split(" ").map(Number);
    low[low.length - 1] = now;
    high[high.length - 1] = now;
    const height = svg.viewBox.baseVal.height;
    const pad = Number(svg.dataset.pad);
    const peak = Math.max(...high);
    const y = (n) => Math.round((height - pad - (n * (height - 2 * pad)) / Math.max(1, peak)) * 10) / 10;
    const sure = xs.map((x, i) => `${x},${y(low[i])}`);
    svg.querySelector("polyline.sure").setAttribute("points", sure.join(" "));
    const band = svg.querySelector("polygon.maybe");
    if (band) {
      const top = xs.map((x, i) => `${x},${y(high[i])}`);
      band.setAttribute("points", [...top, ...sure.reverse()].join(" "));
    }
    const label = svg
      .getAttribute("aria-label")
      .replace(/[\d,]+ now, at most [\d,]+/, `${now} now, at most ${peak}`);
    svg.setAttribute("aria-label", label);
    svg.querySelector(":scope > title").textContent = label;
    svg.dataset.low = low.join(" ");
    svg.dataset.high = high.join(" ");
    return peak;
  }

  // The group page: its chart follows the active card.
  const activeCard = document.querySelector('#group-stats [data-total="active"] .n');
  const chart = document.querySelector("#active-chart svg");
  if (activeCard && chart) {
    const follow = () => {
      const peak = setNow(chart, count(activeCard));
      if (peak === null) return;
      document.querySelector("#active-chart .chart-now").textContent = activeCard.textContent;
      document.querySelector("#active-chart .chart-peak").textContent = String(peak);
    };
    new MutationObserver(follow).observe(activeCard, {
      childList: true,
      characterData: true,
      subtree: true,
    });
    follow();
  }

  // A group row gets its sparkline cell back (rows dashboard.js builds have none).
  const sparks = new Map();
  const template = document.getElementById("sparklines");
  if (template) {
    for (const td of template.content.querySelectorAll("td.spark")) {
      sparks.set(JSON.stringify(JSON.parse(td.dataset.key)), td); // one spelling of the key
    }
  }
  function sparkGroups(tbody) {
    for (const tr of tbody.rows) {
      if (tr.querySelector("td.spark") || tr.dataset.queue === undefined) continue;
      const key = JSON.stringify([tr.dataset.queue, tr.dataset.group]);
      const cell = sparks.get(key);
      if (cell) {
        const copy = cell.cloneNode(true);
        tr.append(copy);
        setNow(copy.querySelector("svg"), count(tr.querySelector("td.num.active")));
      } else {
        const td = document.createElement("td");
        td.className = "spark";
        const span = document.createElement("span");
        span.className = "no-spark";
        span.title = "not drawn: reload the page for this group's last hour";
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
