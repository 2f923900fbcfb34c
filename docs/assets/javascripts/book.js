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

// Figures the reader steps through (attention_book.figures.Frames): the slider swaps the
// light and the dark image to the chosen frame, and shows its label. The frames are SVGs of
// the site itself, so this works offline.
document.addEventListener("input", (event) => {
  const slider = event.target;
  const player = slider.closest && slider.closest(".book-frames");
  if (!player) return;
  const frame = Number(slider.value);
  const base = player.dataset.base;
  const [light, dark] = player.querySelectorAll("img");
  light.src = `${base}.frame-${frame}.svg#only-light`;
  dark.src = `${base}.frame-${frame}.dark.svg#only-dark`;
  player.querySelector("output").textContent = JSON.parse(slider.dataset.labels)[frame];
});
