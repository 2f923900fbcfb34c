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

// Names for two widgets of Material that have a role but no accessible name: the search
// dialog and the progress bar of instant navigation. Set now (this script runs at the end of
// the page) and again whenever instant navigation swaps the page.
const nameWidgets = () => {
  const names = { ".md-search": "Search", ".md-progress": "Loading the page" };
  for (const [selector, name] of Object.entries(names)) {
    for (const element of document.querySelectorAll(selector)) {
      if (!element.hasAttribute("aria-label")) element.setAttribute("aria-label", name);
    }
  }
};
nameWidgets();
if (typeof document$ !== "undefined") document$.subscribe(nameWidgets);
