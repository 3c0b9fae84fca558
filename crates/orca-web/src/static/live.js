// Live updates of an execution page: the server sends the rendered fragment whenever it
// changes (server-sent events). Without JavaScript the page is complete; reload to refresh.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var live = document.getElementById("live");
  if (!live || !window.EventSource || !live.dataset.events) { return; }
  var es = new EventSource(live.dataset.events);
  es.addEventListener("update", function (e) { live.innerHTML = e.data; });
  es.addEventListener("end", function (e) { live.innerHTML = e.data; live.dataset.ended = "1"; es.close(); });
});
