// redis-presence dashboard: live updates over server-sent events, ages that keep ticking.
// Every name is data: it reaches the page through textContent only, never as markup.
"use strict";

(() => {
  const dataNode = document.getElementById("page-data");
  const page = dataNode ? JSON.parse(dataNode.textContent || "{}") : {};
  if (!page.view) return; // an error page: it reloads itself

  const root = page.root || "";
  const live = document.getElementById("live");
  const banner = document.getElementById("banner");
  let offsetMs = Number(page.now_ns) / 1e6 - Date.now(); // the server's clock minus ours
  let refreshTimer = null;
  let refreshing = false;
  let again = false;
  let eventCount = 0; // events applied so far: a refresh that raced one may predate it
  let discarded = 0;

  // -- formatting (as the CLI prints them) -------------------------------------------------
  const thousands = (n) => Number(n).toLocaleString("en-US");
  function humanAge(ms) {
    const s = Math.floor(Math.max(0, ms) / 1000);
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)}m ago`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
    return `${Math.floor(s / 86400)}d ago`;
  }
  function isoUtc(ns) {
    const seconds = Math.floor(Number(ns) / 1e9);
    return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  const groupHref = (queue, group) =>
    `${root}/group?queue=${encodeURIComponent(queue)}&group=${encodeURIComponent(group)}`;
  const keyOf = (queue, group, consumer) => JSON.stringify([queue, group, consumer]);

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }
  function linkCell(text, href, className) {
    const td = cell("", className);
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    td.append(a);
    return td;
  }
  function pill(state) {
    const span = document.createElement("span");
    span.className = `pill ${state}`;
    span.textContent = state;
    return span;
  }

  // -- ages ---------------------------------------------------------------------------------
  function tick() {
    const nowMs = Date.now() + offsetMs;
    for (const td of document.querySelectorAll("td.age[data-hb]")) {
      td.textContent = humanAge(nowMs - Number(td.dataset.hb) / 1e6);
    }
  }
  setInterval(tick, 1000);

  // -- status -------------------------------------------------------------------------------
  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }
  function showBanner(text) {
    banner.textContent = text;
    banner.hidden = !text;
  }

  // -- rendering from the page's JSON twin ---------------------------------------------------
  function rowsByKey(tbody) {
    const rows = new Map();
    for (const tr of tbody.rows) {
      const [q, g, c] = JSON.parse(tr.dataset.key);
      rows.set(keyOf(q, g, c), tr);
    }
    return rows;
  }

  function consumerRow(c) {
    const tr = document.createElement("tr");
    tr.className = `state-${c.state}`;
    tr.dataset.key = keyOf(c.queue, c.group, c.consumer);
    if (!page.group_page) {
      tr.append(cell(c.queue, "name"), linkCell(c.group, groupHref(c.queue, c.group), "name"));
    }
    const state = cell("");
    state.append(pill(c.state));
    const age = cell("", "age");
    age.dataset.hb = String(c.last_heartbeat_ns);
    tr.append(
      cell(c.consumer, "name consumer"),
      state,
      age,
      cell(thousands(c.lease_count), "num"),
      cell(isoUtc(c.registered_at_ns), "when"),
    );
    return tr;
  }

  function groupRow(g) {
    const tr = document.createElement("tr");
    tr.className = g.nobody_reading ? "idle" : "";
    tr.dataset.queue = g.queue;
    tr.dataset.group = g.group;
    const badge = cell("");
    if (g.nobody_reading) {
      const span = document.createElement("span");
      span.className = "badge";
      span.textContent = "nobody is reading";
      badge.append(span);
    }
    tr.append(
      cell(g.queue, "name"),
      linkCell(g.group, groupHref(g.queue, g.group), "name"),
      cell(thousands(g.active), "num active"),
      cell(thousands(g.stale), "num stale"),
      cell(thousands(g.expired), "num expired"),
      badge,
    );
    return tr;
  }

  function setCards(container, counts) {
    if (!container || !counts) return;
    for (const card of container.querySelectorAll("[data-total]")) {
      const name = card.dataset.total;
      if (name === "nobody_reading" && page.view === "consumers") {
        card.hidden = !counts.nobody_reading;
        card.classList.toggle("alarm", Boolean(counts.nobody_reading));
        continue;
      }
      card.querySelector(".n").textContent = thousands(counts[name] ?? 0);
      if (name === "nobody_reading") card.classList.toggle("alarm", counts[name] > 0);
    }
  }

  function setPagerLink(rel, label, cursor, name) {
    const pager = document.getElementById("pager");
    let link = pager.querySelector(`a[rel="${rel}"]`);
    if (cursor === null || cursor === undefined) {
      if (link) link.remove();
      return;
    }
    const params = new URLSearchParams(location.search);
    params.set(name, String(cursor));
    if (!link) {
      link = document.createElement("a");
      link.rel = rel;
      link.textContent = label;
      if (rel === "prev") pager.querySelector("a[rel=next]")?.before(link);
      if (!link.isConnected) pager.append(link);
    }
    link.href = `?${params}`;
  }

  function renderConsumers(model) {
    const tbody = document.querySelector("#consumers tbody");
    const before = rowsByKey(tbody);
    const rows = model.consumers.map((c) => {
      const tr = consumerRow(c);
      const old = before.get(tr.dataset.key);
      if (!old || old.className !== tr.className) tr.classList.add("changed");
      return tr;
    });
    tbody.replaceChildren(...rows);
    document.getElementById("consumers-empty").hidden = rows.length > 0;
    if (model.group) setCards(document.getElementById("group-stats"), model.group);
    setPagerLink("prev", "← Previous", model.prev_cursor, "cursor");
    setPagerLink("next", "Next →", model.next_cursor, "cursor");
  }

  function renderGroups(model) {
    const tbody = document.querySelector("#groups tbody");
    tbody.replaceChildren(...model.groups.map(groupRow));
    document.getElementById("groups-empty").hidden = model.groups.length > 0;
    setCards(document.getElementById("totals"), model.totals);
    const count = document.querySelector("#pager .count");
    if (count) {
      const pages = model.pages > 1 ? `, page ${model.page} of ${model.pages}` : "";
      count.textContent = `${thousands(model.shown)} group(s)${pages}`;
    }
    setPagerLink("prev", "← Previous", model.page > 1 ? model.page - 1 : null, "page");
    setPagerLink("next", "Next →", model.page < model.pages ? model.page + 1 : null, "page");
  }

  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    const eventsBefore = eventCount;
    try {
      const response = await fetch(location.pathname + location.search, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      const model = await response.json();
      if (!response.ok) {
        showBanner(`${model.message || response.statusText} (retrying)`);
        return;
      }
      showBanner("");
      if (eventCount !== eventsBefore && discarded < 3) {
        discarded += 1; // an event came in meanwhile: this read may predate it
        again = true;
        return;
      }
      discarded = 0;
      offsetMs = Number(model.now_ns) / 1e6 - Date.now();
      const readAt = document.getElementById("read-at");
      if (readAt) readAt.textContent = isoUtc(model.now_ns);
      if (page.view === "groups") renderGroups(model);
      else renderConsumers(model);
      tick();
    } catch (error) {
      showBanner(`The dashboard cannot reach its server (${error.message}); retrying`);
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        scheduleRefresh(100);
      }
    }
  }

  function scheduleRefresh(delayMs = 250) {
    if (refreshTimer !== null) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      refresh();
    }, delayMs);
  }
  setInterval(() => {
    if (!document.hidden) scheduleRefresh(0);
  }, 5000);

  // -- events -------------------------------------------------------------------------------
  function applyEvent(event) {
    if (page.view !== "consumers") return;
    const tbody = document.querySelector("#consumers tbody");
    const tr = rowsByKey(tbody).get(keyOf(event.queue, event.group, event.consumer));
    if (!tr) return;
    if (event.kind === "left" || event.kind === "pruned") {
      tr.remove();
      document.getElementById("consumers-empty").hidden = tbody.rows.length > 0;
      return;
    }
    const state = { stale: "stale", expired: "expired", recovered: "active", joined: "active" }[
      event.kind
    ];
    if (!state) return;
    tr.className = `state-${state} changed`;
    const stateCell = tr.querySelector(".pill").parentElement;
    stateCell.replaceChildren(pill(state));
    if (event.last_heartbeat_ns !== null) {
      tr.querySelector("td.age").dataset.hb = String(event.last_heartbeat_ns);
    }
  }

  const params = new URLSearchParams();
  if (page.queue) params.set("queue", page.queue);
  if (page.group) params.set("group", page.group);
  const source = new EventSource(`${root}/api/v1/events?${params}`);
  source.addEventListener("hello", () => {
    setLive("live", "live");
    scheduleRefresh(0); // catch up with anything between the page's read and now
  });
  source.addEventListener("presence", (message) => {
    eventCount += 1;
    applyEvent(JSON.parse(message.data));
    scheduleRefresh();
  });
  source.addEventListener("status", (message) => {
    const status = JSON.parse(message.data);
    if (status.redis_up) {
      setLive("live", "live");
      showBanner("");
      scheduleRefresh(0);
    } else {
      setLive("down", "Redis unreachable");
      showBanner(`Redis cannot be reached: ${status.message} (retrying)`);
    }
  });
  source.addEventListener("resync", () => scheduleRefresh(0));
  source.addEventListener("error", () => {
    if (source.readyState !== EventSource.OPEN) setLive("static", "reconnecting…");
  });
  tick();
})();
