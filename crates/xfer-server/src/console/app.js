// The overview's live figures: every 2 s, the counters from /console/stats.json; the rate
// and mean latency are the differences between two readings over the time between them.
(function () {
  "use strict";
  const line = document.getElementById("rate-line");
  if (!line) return;
  const rate = document.getElementById("rate");
  const latency = document.getElementById("latency");
  const inFlight = document.getElementById("in-flight");
  const points = [];
  const KEEP = 60;
  let last = null;
  function draw() {
    const max = Math.max(1, ...points);
    const step = 600 / (KEEP - 1);
    const start = KEEP - points.length;
    line.setAttribute("points", points.map(function (v, i) {
      return ((start + i) * step).toFixed(1) + "," + (118 - (v / max) * 110).toFixed(1);
    }).join(" "));
  }
  async function tick() {
    try {
      const r = await fetch("/console/stats.json", { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      const s = await r.json();
      if (last && s.at_ms > last.at_ms) {
        const seconds = (s.at_ms - last.at_ms) / 1000;
        const per = (s.answered - last.answered) / seconds;
        const n = s.latency_count - last.latency_count;
        rate.textContent = per.toFixed(1);
        latency.textContent = n > 0 ? (((s.latency_sum_seconds - last.latency_sum_seconds) / n) * 1000).toFixed(2) + " ms" : "–";
        points.push(per);
        if (points.length > KEEP) points.shift();
        draw();
      }
      inFlight.textContent = String(s.in_flight);
      last = s;
    } catch (e) {
      // The next tick tries again.
    }
  }
  tick();
  setInterval(tick, 2000);
})();
