// graphckpt UI: a running thread's page follows the server's durable SSE stream of that thread.
// #live[data-stream] is the stream; after each event the fragment at data-fragment replaces #live.
// #live[data-wait] (a thread with no checkpoint yet): the fragment is fetched again every data-wait ms instead.
// EventSource resends Last-Event-ID when it reconnects; if it gives up (the server was down),
// a new one starts after the last id seen (?after=), so nothing is missed after a restart.
(function () {
  "use strict";
  var source = null, url = null, lastId = null, timer = null, busy = false, again = false;

  function live() { return document.getElementById("live"); }

  function refresh() {
    var el = live();
    if (!el || !el.dataset.fragment) { return; }
    if (busy) { again = true; return; }
    busy = true;
    fetch(el.dataset.fragment, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var now = live();
        if (html && now) { now.outerHTML = html; }
        follow();
      })
      .catch(function () {})
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function stop() {
    if (source) { source.close(); source = null; }
    url = null;
  }

  function open(target) {
    stop();
    url = target;
    var full = lastId ? target + "?after=" + encodeURIComponent(lastId) : target;
    source = new EventSource(full);
    var onEvent = function (e) { if (e.lastEventId) { lastId = e.lastEventId; } refresh(); };
    ["checkpoint", "interrupt", "run.done", "run.failed", "run.interrupted", "stream.reset"].forEach(function (k) {
      source.addEventListener(k, onEvent);
    });
    source.addEventListener("end", function () { stop(); refresh(); });
    source.onopen = function () { refresh(); };  // what happened while the stream was away
    source.onerror = function () {
      if (source && source.readyState === EventSource.CLOSED) {
        var was = url;
        stop();
        clearTimeout(timer);
        timer = setTimeout(function () { open(was); }, 500);
      }
    };
  }

  function follow() {
    var el = live();
    var target = el && el.dataset.stream;
    if (!target) {
      stop();
      // a thread with no checkpoint yet (data-wait): ask again until its first run has stored one
      if (el && el.dataset.wait) { clearTimeout(timer); timer = setTimeout(refresh, parseInt(el.dataset.wait, 10)); }
      return;
    }
    if (target !== url) { open(target); }
  }

  // a call in flight: its elapsed time (the server's, at render) goes on counting between two refreshes
  function tick() {
    var now = Date.now();
    document.querySelectorAll(".elapsed[data-elapsed]").forEach(function (el) {
      if (!el.dataset.t0) { el.dataset.t0 = String(now); }
      var s = parseFloat(el.dataset.elapsed) + (now - parseFloat(el.dataset.t0)) / 1000;
      el.textContent = "running " + s.toFixed(1) + " s";
    });
  }

  document.addEventListener("DOMContentLoaded", function () { follow(); setInterval(tick, 500); });
})();
