// Lets the report page draw its flame graph at once. d3-flame-graph sets each frame's width,
// place and label in d3 transitions; a new frame's width grows from 0 over d3's default 250 ms,
// whatever `transitionDuration` says, and d3 runs transitions at animation frames. So for a
// quarter of a second after the page loads (the whole time, in a tab that gets no animation
// frame: in the background, printed, a headless screenshot) the graph is partly drawn.
//
// This script runs before the library reads `window.requestAnimationFrame` and wraps it:
// `gpushimAtOnce(draw)` runs `draw`, then, at once, every animation-frame callback asked for
// meanwhile (d3's timer, and those it asks for in turn), with `performance.now()` (d3's clock)
// a minute ahead, past the end of every transition, so each ends in its final state. Outside
// `gpushimAtOnce` the browser runs the callbacks as usual, and the clock is the browser's.
"use strict";
(function () {
  const browserFrame = window.requestAnimationFrame.bind(window);
  const AHEAD_MS = 60000;
  let held = null;
  window.requestAnimationFrame = (callback) => {
    if (held === null) return browserFrame(callback);
    held.push(callback);
    return 0;
  };
  window.gpushimAtOnce = (draw) => {
    const outer = held;
    held = [];
    try {
      draw();
      const now = performance.now.bind(performance);
      performance.now = () => now() + AHEAD_MS;
      try {
        // A transition asks for a few frames (start, first tick, end); 100 rounds is far
        // more than any draw asks for.
        for (let round = 0; round < 100 && held.length; round++) {
          for (const callback of held.splice(0)) callback(performance.now());
        }
      } finally {
        delete performance.now;
      }
    } finally {
      const left = held;
      held = outer;
      left.forEach((callback) => window.requestAnimationFrame(callback));
    }
  };
})();
