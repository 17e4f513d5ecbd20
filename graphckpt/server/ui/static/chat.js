// graphckpt UI: the conversation view of a running thread. #chatlive[data-stream] is the thread's live stream with
// its `messages` events (a model's answer piece by piece): each piece is appended to a streaming bubble (as text,
// never as HTML); after each checkpoint or the run's end the page's #chatlive is fetched again and replaces it.
(function () {
  "use strict";
  var source = null, bubbles = {}, busy = false;

  function box() { return document.getElementById("chatlive"); }

  function bubble(key) {
    if (bubbles[key]) { return bubbles[key]; }
    var list = document.querySelector("#chatlive ol.chat");
    if (!list) { return null; }
    var li = document.createElement("li"), who = document.createElement("div"), text = document.createElement("div");
    li.className = "r-assistant streaming";
    who.className = "who";
    who.textContent = "assistant · streaming";
    text.className = "text";
    li.appendChild(who);
    li.appendChild(text);
    list.appendChild(li);
    bubbles[key] = li;
    return li;
  }

  function onPiece(e) {
    var data;
    try { data = JSON.parse(e.data); } catch (err) { return; }
    var chunk = (data && data[0]) || {};
    var li = bubble(chunk.id || "live");
    if (li && typeof chunk.content === "string") { li.querySelector(".text").textContent += chunk.content; }
  }

  function refresh() {
    if (busy) { return; }
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("chatlive");
        var now = box();
        if (fresh && now) {
          now.replaceWith(document.importNode(fresh, true));
          bubbles = {};
          if (!fresh.dataset.stream && source) { source.close(); source = null; }
        }
      })
      .catch(function () {})
      .finally(function () { busy = false; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var el = box();
    if (!el || !el.dataset.stream) { return; }
    source = new EventSource(el.dataset.stream);
    source.onopen = function () { var now = box(); if (now) { now.dataset.connected = "1"; } };
    source.addEventListener("messages", onPiece);
    ["checkpoint", "interrupt", "run.done", "run.failed", "run.interrupted"].forEach(function (k) {
      source.addEventListener(k, refresh);
    });
    source.addEventListener("end", function () { if (source) { source.close(); source = null; } refresh(); });
  });
})();
