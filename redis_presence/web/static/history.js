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
        tr.append(cell.cloneNode(true));
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
