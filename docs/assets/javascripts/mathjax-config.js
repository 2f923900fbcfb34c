// MathJax 3, served by the site itself (see docs/hooks/book.py): no CDN, no network.
// Chapters write math as $...$ and $$...$$; pymdownx.arithmatex wraps it in .arithmatex.
// Notebook pages keep raw $...$ in their Markdown cells, rendered through the same config.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown|jp-MarkdownOutput",
  },
};

// Material's instant navigation swaps pages without reloading: typeset each new page.
document$.subscribe(() => {
  if (!window.MathJax.startup || !window.MathJax.typesetPromise) return;
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
