// redis-presence dashboard: sortable tables. A header that can sort (th[data-sort]) gets a
// button; its column's order is told by aria-sort (and a line screen readers announce), and
// kept over the rows dashboard.js re-renders live. It sorts the rows the page holds; the
// groups page is sorted by the server over every group (`sort=`): its headers are links,
// and the order they say is kept here over the live re-renders.
"use strict";

(() => {
  const RANK = { active: 0, stale: 1, expired: 2, unknown: 3 };
  const FIRST = { text: "ascending", when: "ascending", state: "ascending", age: "ascending", num: "descending" };

  function valueOf(td, kind) {
    if (!td) return kind === "text" || kind === "when" ? "" : Infinity;
    const text = td.textContent.trim();
    if (kind === "num") return text === "" ? -Infinity : Number(text.replace(/[^\d.-]/g, ""));
    if (kind === "age") return -Number(td.dataset.hb || 0); // youngest heartbeat first
    if (kind === "state") return RANK[td.querySelector(".pill")?.textContent.trim()] ?? 9;
    return text.toLowerCase();
  }

  function sortable(table) {
    const head = table.tHead?.rows[0];
    const tbody = table.tBodies[0];
    if (!head || !tbody) return;
    const status = document.createElement("p");
    status.className = "visually-hidden";
    status.setAttribute("aria-live", "polite");
    table.after(status);
    let shown = null; // { index, kind, order }

    function apply() {
      if (!shown) return;
      const rows = [...tbody.rows];
      const keyed = rows.map((tr, i) => [valueOf(tr.cells[shown.index], shown.kind), i, tr]);
      const sign = shown.order === "ascending" ? 1 : -1;
      keyed.sort((a, b) => (a[0] < b[0] ? -sign : a[0] > b[0] ? sign : a[1] - b[1]));
      if (keyed.every(([, , tr], i) => tr === rows[i])) return; // sorted: nothing moves
      tbody.append(...keyed.map(([, , tr]) => tr));
    }

    for (const th of head.cells) {
      const kind = th.dataset.sort;
      if (!kind) continue;
      if (th.querySelector("a.sort")) {
        // sorted by the server over every row (a link): kept over the live re-renders
        const order = th.getAttribute("aria-sort");
        if (order && kind !== "text") shown = { index: th.cellIndex, kind, order };
        continue;
      }
      const button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      button.append(...th.childNodes);
      th.append(button);
      button.addEventListener("click", () => {
        const index = th.cellIndex;
        const order = shown && shown.index === index
          ? (shown.order === "ascending" ? "descending" : "ascending")
          : FIRST[kind] || "ascending";
        shown = { index, kind, order };
        for (const other of head.cells) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", order);
        status.textContent = `Sorted by ${button.textContent.trim().toLowerCase()}, ${order}: the rows of this page.`;
        apply();
      });
    }
    new MutationObserver(apply).observe(tbody, { childList: true });
  }

  for (const table of document.querySelectorAll("table.grid")) sortable(table);
})();
