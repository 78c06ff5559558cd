// The admin UI's only script: re-fetches the live rows of a mailboxes table (its
// data-refresh URL) every 5 s, without a full reload, and the page order's age (the rows'
// x-order-freshness header). The pages work without it.
(function () {
  "use strict";
  var table = document.querySelector("table[data-refresh]");
  if (!table) return;
  var body = table.querySelector("tbody");
  var stamp = document.getElementById("refreshed");
  var freshness = document.getElementById("order-freshness");
  setInterval(function () {
    fetch(table.getAttribute("data-refresh"), { credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 || r.redirected) { location.href = "/login"; return null; }
        var order = r.headers.get("x-order-freshness");
        if (r.ok && order && freshness) freshness.textContent = order;
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        body.innerHTML = html;
        if (stamp) stamp.textContent = "Refreshed " + new Date().toISOString().slice(11, 19) + " UTC.";
      })
      .catch(function () { /* keep the last rows */ });
  }, 5000);
})();
