// Live refresh of the activity dashboard: fetch the panel's fresh HTML and swap it in, one request
// at a time, every data-refresh-ms. data-refreshes counts the swaps (tests wait on it).
"use strict";
(function () {
  const panel = document.getElementById("activity-panel");
  const state = document.getElementById("activity-refresh-state");
  if (!panel) {
    return;
  }
  const every = Number(panel.dataset.refreshMs) || 5000;

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
      panel.dataset.refreshes = String(Number(panel.dataset.refreshes) + 1);
      state.textContent = "";
    } catch (error) {
      state.textContent = `Last refresh failed (${error.message}); retrying.`;
    }
    window.setTimeout(refresh, every);
  }

  window.setTimeout(refresh, every);
})();
