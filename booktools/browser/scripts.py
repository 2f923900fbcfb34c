"""The JavaScript that the browser check runs in a page, one script per question it asks.

Each is a function expression for Playwright's ``page.evaluate``; `booktools.browser.check`
reads what they return. They do in the page, in one call, what would otherwise take a round
trip from Python per element (a copy button, a slider), which is most of a check's time.
"""

# True once every image has finished loading (or failed): after the colour scheme changed,
# the images of the other scheme are shown.
IMAGES_SETTLED = "() => [...document.images].every(image => image.complete)"

# Waits for the page's running finite CSS transitions and animations to end (at most 2 s):
# after the palette toggle, Material fades its colours, and a check that reads them mid-way
# (axe's contrast rule, on a loaded machine) sees colours no reader is left with. Returns how
# many it waited for.
ANIMATIONS_SETTLED = """async () => {
  const running = document.getAnimations().filter(animation => {
    const timing = animation.effect && animation.effect.getComputedTiming();
    return timing && Number.isFinite(timing.endTime) && animation.playState === 'running';
  });
  const ended = Promise.all(running.map(animation => animation.finished.catch(() => null)));
  await Promise.race([ended, new Promise(done => setTimeout(done, 2000))]);
  return running.length;
}"""

# Reports the state of the page, once its fonts are loaded. Math is rendered when the site is
# built (booktools.plugin.katex): each formula's element holds KaTeX's HTML and MathML, styled by
# KaTeX's style sheet, and no script renders math in the page.
PAGE_STATE = """async () => {
  await document.fonts.ready;
  const math = [...document.querySelectorAll('.arithmatex')];
  // Folded blocks count too: a reader opens them. Open every fold to measure, then restore.
  const folds = [...document.querySelectorAll('details')].filter(d => !d.open);
  folds.forEach(d => { d.open = true; });
  const images = [...document.querySelectorAll('img')];
  const wide = [...document.querySelectorAll('pre > code')]
    .filter(code => code.getClientRects().length > 0)  // displayed (not in a hidden tab)
    .filter(code => [code, code.parentElement].some(box =>
      getComputedStyle(box).display !== 'inline' && box.scrollWidth > box.clientWidth + 1))
    .map(code => code.textContent.trim().split('\\n')[0].slice(0, 60));
  folds.forEach(d => { d.open = false; });
  return {
    images: images.map(img => ({
      src: img.currentSrc || img.src,
      ok: img.complete && img.naturalWidth > 0,
    })),
    math: math.map(el => {
      const katex = el.querySelector('.katex');
      const error = el.querySelector('.katex-error');
      const mathml = el.querySelector('.katex-mathml');
      const tex = el.querySelector('annotation[encoding="application/x-tex"]');
      return {
        text: (tex ? tex.textContent : el.textContent).slice(0, 80),
        rendered: katex !== null && error === null,
        // KaTeX's message, on the error box KaTeX draws when it is told not to throw.
        error: error && (error.getAttribute('title') || error.textContent).slice(0, 160),
        mathml: el.querySelector('math') !== null,
        // KaTeX's style sheet applied: its fonts, and the MathML hidden from sight.
        styled: katex !== null && getComputedStyle(katex).fontFamily.includes('KaTeX_Main')
          && mathml !== null && getComputedStyle(mathml).position === 'absolute',
      };
    }),
    // A font the style sheet names that the browser could not load.
    broken_fonts: [...document.fonts].filter(f => f.status === 'error')
      .map(f => `${f.family} ${f.style} ${f.weight}`),
    // Scripts that render math in the page: the pages must load none.
    math_scripts: [...document.scripts].map(s => s.src).filter(src => /mathjax|katex/i.test(src))
      .concat(['MathJax', 'katex', 'renderMathInElement'].filter(name => name in window)
        .map(name => `window.${name}`)),
    // Code that scrolls sideways hides its line ends.
    wide_code: wide,
    // Bytes the page transferred: the document and every resource it loaded.
    bytes: performance.getEntriesByType('navigation').concat(
      performance.getEntriesByType('resource')
    ).reduce((total, entry) => total + (entry.transferSize || entry.encodedBodySize || 0), 0),
  };
}"""

# In print: Material hides the navigation, and the book's script opens every fold first.
PRINT_STATE = """() => {
  window.dispatchEvent(new Event('beforeprint'));
  const closed = document.querySelectorAll('details:not([open])').length;
  const shown = [...document.querySelectorAll('.md-header, .md-sidebar, .md-footer')]
    .filter(el => getComputedStyle(el).display !== 'none').length;
  window.dispatchEvent(new Event('afterprint'));
  return {closed, shown};
}"""

# axe-core (shipped inside the axe-playwright-python wheel, so nothing is downloaded): the
# serious and critical violations of the WCAG rules it checks, on the whole page. One rule is
# narrowed: inside highlighted code, a page holds thousands of tokens in a dozen styles, and
# axe's contrast rule, which looks at each, was most of the check's time. There it looks at one
# shown token of each style (its colour, the background behind it, its font size and weight,
# its opacity), the one with the longest text (axe judges a text of a character or two only
# "incomplete"), under the rule "color-contrast-code": every colour pairing a reader sees in a
# code block of the page is still checked, once, in one run of axe.
AXE_RUN = """async () => {
  const SAMPLE = 'data-book-contrast-sample';
  const background = element => {
    for (let node = element; node instanceof Element; node = node.parentElement) {
      const color = getComputedStyle(node).backgroundColor;
      if (color !== 'rgba(0, 0, 0, 0)' && color !== 'transparent') return color;
    }
    return 'none';
  };
  const ownText = element => [...element.childNodes]
    .filter(node => node.nodeType === Node.TEXT_NODE).map(node => node.textContent.trim())
    .join('').length;
  const styles = new Map();  // per style of code text: its shown token with the longest text
  for (const element of document.querySelectorAll('.highlight code *')) {
    const length = ownText(element);
    if (!length || !element.checkVisibility()) continue;  // axe skips hidden text too
    const s = getComputedStyle(element);
    const key = [s.color, background(element), s.fontSize, s.fontWeight, s.opacity].join();
    if (!styles.has(key) || styles.get(key).length < length) styles.set(key, {element, length});
  }
  const samples = [...styles.values()].map(sample => sample.element);
  samples.forEach(element => element.setAttribute(SAMPLE, ''));
  axe.configure({rules: [
    {id: 'color-contrast', selector: '*:not(.highlight code *)'},
    {id: 'color-contrast-code', selector: `[${SAMPLE}]`, any: ['color-contrast'], all: [],
     none: [], tags: ['wcag2aa', 'wcag143'], metadata: {
       description: 'Text in highlighted code has enough contrast (one token of each style)',
       help: 'Elements must meet minimum color contrast ratio thresholds'}},
  ]});
  try {
    const result = await axe.run(document, {resultTypes: ['violations']});
    return result.violations
      .filter(v => v.impact === 'serious' || v.impact === 'critical')
      .map(v => ({id: v.id, impact: v.impact, count: v.nodes.length,
                  first: v.nodes[0].target.join(' ')}));
  } finally {
    samples.forEach(element => element.removeAttribute(SAMPLE));
  }
}"""

# Every figure the reader steps through: move its slider to another frame, wait for the image,
# and report whether the image changed, loaded, and the label followed; then move it back.
MOVE_SLIDERS = """async () => {
  const results = [];
  for (const player of document.querySelectorAll('.book-frames')) {
    const slider = player.querySelector('input[type=range]');
    const image = [...player.querySelectorAll('img')].find(i => i.getClientRects().length > 0);
    const label = player.querySelector('output');
    const start = slider.value, before = image.src, beforeLabel = label.textContent;
    slider.value = start === slider.max ? slider.min : slider.max;
    const loaded = new Promise(done => { image.onload = done; image.onerror = done; });
    slider.dispatchEvent(new Event('input', {bubbles: true}));
    if (image.src !== before) {  // a new frame is on its way: wait for it (an unchanged one is not)
      await Promise.race([loaded, new Promise(done => setTimeout(done, 10000))]);
    }
    results.push({
      figure: player.dataset.base,
      changed: image.src !== before,
      loaded: image.complete && image.naturalWidth > 0,
      relabelled: label.textContent !== beforeLabel,
    });
    slider.value = start;
    slider.dispatchEvent(new Event('input', {bubbles: true}));
  }
  return results;
}"""

# Press the copy button of every Python block (in folds and tabs too, opened for it and closed
# again after) and return what each put on the clipboard ("" if nothing came within a second).
COPY_BUTTONS = """async () => {
  const folds = [...document.querySelectorAll('details:not([open])')];
  folds.forEach(d => { d.open = true; });
  const tabs = document.createElement('style');
  tabs.textContent = '.tabbed-content > .tabbed-block { display: block !important; }';
  document.head.append(tabs);
  const texts = [];
  for (const button of document.querySelectorAll('.language-python button[data-md-type=copy]')) {
    await navigator.clipboard.writeText('');
    button.click();
    let text = '';
    for (let tries = 0; tries < 100 && !text; tries++) {
      text = await navigator.clipboard.readText();
      if (!text) await new Promise(done => setTimeout(done, 10));
    }
    texts.push(text);
  }
  folds.forEach(d => { d.open = false; });
  tabs.remove();
  return texts;
}"""

# The id of the radio button of Material's dark palette ("slate"), when the page has one and
# shows another; null otherwise (a page without Material's palette toggle, or already dark).
DARK_PALETTE = """() => {
  const input = document.querySelector('input[name="__palette"][data-md-color-scheme="slate"]');
  return input && !input.checked ? input.id : null;
}"""

# True once Material shows the dark palette.
IS_DARK = "() => document.body.getAttribute('data-md-color-scheme') === 'slate'"

# The live widgets of the page (booktools.live.widgets): each one's name, and whether a file of a
# live widget (its code or its model) was loaded already, which must wait for its Load button.
LIVE_WIDGETS = """() => ({
  widgets: [...document.querySelectorAll('.book-live')].map(w => ({
    name: w.dataset.live,
    reference: new URL(w.dataset.model + 'reference.json', location.href).href,
  })),
  loaded: performance.getEntriesByType('resource').map(e => e.name)
    .filter(name => name.includes('/live/')),
})"""

# How many resources the page has loaded so far (the weighing of a widget starts after them).
RESOURCE_COUNT = "() => performance.getEntriesByType('resource').length"

# Bytes of the resources loaded after the first `start` ones, and their names.
RESOURCES_SINCE = """start => {
  const entries = performance.getEntriesByType('resource').slice(start);
  return {
    bytes: entries.reduce((total, e) => total + (e.transferSize || e.encodedBodySize || 0), 0),
    names: entries.map(e => e.name.split('/').slice(-2).join('/')),
  };
}"""

# The state of a live widget ("loading", "ready", "running", "done", "error").
LIVE_STATE = """name => {
  const widget = document.querySelector(`.book-live[data-live="${name}"]`);
  return widget ? widget.dataset.state || '' : 'missing';
}"""

# What a live widget computed last (window.bookLive[name].result), typed arrays as plain ones.
LIVE_RESULT = """name => JSON.parse(JSON.stringify(
  (window.bookLive && window.bookLive[name] || {}).result || null,
  (key, value) => ArrayBuffer.isView(value) ? Array.from(value) : value))"""

# A JSON file of the site, fetched by the page.
FETCH_JSON = "url => fetch(url).then(response => response.json())"

# Move every control of a live widget, as a reader does: every choice of every picker, then its
# sliders to their ends (the page reports an error in what each redraws as an uncaught exception).
LIVE_CONTROLS = """name => {
  const widget = document.querySelector(`.book-live[data-live="${name}"]`);
  let moved = 0;
  for (const control of widget.querySelectorAll('select, input[type=range]')) {
    const values = control.tagName === 'SELECT'
      ? [...control.options].map(option => option.value) : [control.min, control.max];
    const start = control.value;
    for (const value of [...values, start]) {
      control.value = value;
      control.dispatchEvent(new Event(control.tagName === 'SELECT' ? 'change' : 'input'));
      moved += 1;
    }
  }
  return moved;
}"""
