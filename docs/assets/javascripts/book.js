// Small behaviours of the book's pages that Material does not provide.

// Printing: folded blocks (exercise solutions, long listings) are printed open, then restored.
(() => {
  let opened = [];
  window.addEventListener("beforeprint", () => {
    opened = [...document.querySelectorAll("details:not([open])")];
    opened.forEach((fold) => { fold.open = true; });
  });
  window.addEventListener("afterprint", () => {
    opened.forEach((fold) => { fold.open = false; });
    opened = [];
  });
})();
