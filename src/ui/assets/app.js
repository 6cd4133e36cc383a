// kairos console: progressive enhancement only. Every page works without this file.
(function () {
  "use strict";
  var KEY = "kairos.tz";

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function localText(d) {
    var zone = "";
    try {
      zone = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
        .formatToParts(d).filter(function (p) { return p.type === "timeZoneName"; })
        .map(function (p) { return p.value; }).join("");
    } catch (e) { zone = ""; }
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + (zone ? " " + zone : "");
  }

  function apply(mode) {
    var nodes = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < nodes.length; i++) {
      var t = nodes[i];
      if (!t.hasAttribute("data-utc")) { t.setAttribute("data-utc", t.textContent); }
      t.textContent = mode === "local" ? localText(new Date(t.getAttribute("datetime"))) : t.getAttribute("data-utc");
    }
    var button = document.getElementById("tz-toggle");
    if (button) {
      button.textContent = mode === "local" ? "Local time" : "UTC";
      button.setAttribute("aria-pressed", mode === "local" ? "true" : "false");
    }
  }

  function current() {
    try { return localStorage.getItem(KEY) === "local" ? "local" : "utc"; } catch (e) { return "utc"; }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("tz-toggle");
    if (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var next = current() === "local" ? "utc" : "local";
        try { localStorage.setItem(KEY, next); } catch (e) { /* private mode: not remembered */ }
        apply(next);
      });
    }
    apply(current());

    var all = document.getElementById("select-all");
    if (all) {
      all.hidden = false;
      all.addEventListener("change", function () {
        var boxes = document.querySelectorAll("input[name=ids]");
        for (var i = 0; i < boxes.length; i++) { boxes[i].checked = all.checked; }
      });
    }
  });
})();
