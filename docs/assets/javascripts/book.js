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

// Live widgets (booktools.live.widgets): the book's trained models, run in the page. Their Load button
// is hidden until this script runs (without JavaScript a note says why); pressing it imports the
// widget's module, which fetches the model. Nothing of it loads before the reader asks.
const showLiveButtons = () => {
  for (const button of document.querySelectorAll(".book-live__load")) button.hidden = false;
};
showLiveButtons();
if (typeof document$ !== "undefined") document$.subscribe(showLiveButtons);
document.addEventListener("click", async (event) => {
  const button = event.target.closest && event.target.closest(".book-live__load");
  if (!button) return;
  const container = button.closest(".book-live");
  button.disabled = true;
  button.textContent = "Loading…";
  container.dataset.state = "loading";
  try {
    const widget = await import(new URL(container.dataset.module, location.href).href);
    await widget.mount(container);
  } catch (error) {
    container.dataset.state = "error";
    button.textContent = `The widget could not load (${error.message}).`;
    throw error;
  }
});
