// Live updates without a reload: every few seconds, fetch this same page and swap
// each [data-live] region for its fresh copy. The server renders (and escapes)
// everything; nothing here builds HTML from data. A region holding the focused
// element is left alone so a click or a keystroke is never lost mid-swap, and a
// <details> keeps the open state the reader gave it.
(function () {
  "use strict";
  // A form with data-confirm asks first (the text says what the change does).
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  var seconds = Number(document.body.getAttribute("data-live-interval") || "0");
  var status = document.getElementById("live-status");
  if (!(seconds > 0) || !document.querySelector("[data-live]")) {
    if (status) { status.hidden = true; }
    return;
  }
  var busy = false;

  function show(text, state) {
    if (status) {
      status.textContent = text;
      status.className = "live " + state;
    }
  }

  // A <details> the reader opened (or closed) stays so across swaps.
  function keepOpenState(region, copy) {
    region.querySelectorAll("details[id]").forEach(function (old) {
      var same = copy.querySelector("#" + CSS.escape(old.id));
      if (same) { same.open = old.open; }
    });
  }

  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Venturi-Live": "1" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      // Signed out meanwhile (the token changed): reloading leads to the sign-in page.
      if (response.status === 401) { window.location.reload(); return null; }
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    }).then(function (html) {
      if (html === null) { return; }
      var fresh = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll("[data-live]").forEach(function (region) {
        var replacement = fresh.getElementById(region.id);
        if (replacement && !region.contains(document.activeElement)) {
          var copy = document.importNode(replacement, true);
          keepOpenState(region, copy);
          region.replaceWith(copy);
        }
      });
      show("live · " + new Date().toLocaleTimeString(), "ok");
    }).catch(function () {
      show("live · retrying", "bad");
    }).finally(function () {
      busy = false;
    });
  }

  show("live", "ok");
  window.setInterval(refresh, seconds * 1000);
}());
