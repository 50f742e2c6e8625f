// The activity dashboard, live. The figures, "pages now" and today's bars follow the live stream
// (an EventSource on data-live: a `stats` event at once and within a second of each change); the
// whole panel is fetched again every data-refresh-ms (a minute), which is all that moves where the
// stream is refused (a WSGI server, a proxy). data-events counts the events applied and
// data-refreshes the panel swaps (tests wait on them).
"use strict";
(function () {
  const panel = document.getElementById("activity-panel");
  const state = document.getElementById("activity-refresh-state");
  if (!panel) {
    return;
  }
  const every = Number(panel.dataset.refreshMs) || 60000;

  function count(name) {
    panel.dataset[name] = String(Number(panel.dataset[name]) + 1);
  }

  // "active.day" of {"active": {"day": 3}}: 3
  function figure(data, path) {
    return path.split(".").reduce((value, key) => (value == null ? undefined : value[key]), data);
  }

  // Every bar of the chart scaled again to its tallest, as charts.bar_chart draws them.
  function redraw(svg) {
    const top = Number(svg.dataset.plotTop);
    const height = Number(svg.dataset.plotHeight);
    const bars = Array.from(svg.querySelectorAll("rect.bar"));
    const peak = Math.max(1, ...bars.map((bar) => Number(bar.dataset.value) || 0));
    for (const bar of bars) {
      if (bar.dataset.value === "") {
        continue;
      }
      const value = Number(bar.dataset.value);
      const drawn = Math.max((height * value) / peak, 1);
      bar.setAttribute("y", (top + height - drawn).toFixed(1));
      bar.setAttribute("height", drawn.toFixed(1));
      const title = bar.querySelector("title");
      title.textContent = title.textContent.replace(/: .*$/, ": " + value.toLocaleString("en-US"));
    }
    svg.querySelector("text.peak").textContent = peak.toLocaleString("en-US");
  }

  function showPagesNow(pages) {
    const body = panel.querySelector("#activity-pages-now tbody");
    const rows = pages.map((page) => {
      const row = document.createElement("tr");
      for (const text of [page.path, String(page.people)]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      }
      return row;
    });
    if (!rows.length) {
      const row = document.createElement("tr");
      row.innerHTML = '<td colspan="2">No one online is on a page.</td>';
      rows.push(row);
    }
    body.replaceChildren(...rows);
  }

  function apply(data) {
    for (const element of panel.querySelectorAll(".activity-figures [data-figure]")) {
      const value = figure(data, element.dataset.figure);
      if (value !== undefined) {
        element.textContent = String(value);
      }
    }
    for (const svg of panel.querySelectorAll("svg[data-live]")) {
      const value = figure(data, svg.dataset.live);
      const bar = svg.querySelector("rect.live");
      if (value !== undefined && bar) {
        bar.dataset.value = String(value);
        redraw(svg);
      }
    }
    showPagesNow(data.pages_now);
    count("events");
  }

  if (window.EventSource && panel.dataset.live) {
    const stream = new EventSource(panel.dataset.live);
    stream.addEventListener("stats", (event) => apply(JSON.parse(event.data)));
    stream.addEventListener("error", () => {
      if (stream.readyState === EventSource.CLOSED) {
        state.textContent = "Live updates are refused here: the panel refreshes every minute.";
      }
    });
  }

  async function refresh() {
    try {
      const response = await fetch(panel.dataset.url, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (!response.ok || !response.headers.get("Content-Type").startsWith("application/json")) {
        throw new Error(response.redirected ? "signed out: reload the page" : `HTTP ${response.status}`);
      }
      const body = await response.json();
      panel.innerHTML = body.html;
      count("refreshes");
      state.textContent = "";
    } catch (error) {
      state.textContent = `Last refresh failed (${error.message}); retrying.`;
    }
    window.setTimeout(refresh, every);
  }

  window.setTimeout(refresh, every);
})();
