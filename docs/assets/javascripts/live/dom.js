// What the live widgets (widget.js, flash.js, train_widget.js) share to build their HTML: an
// element with its attributes and children, text escaped for SVG markup, and ids unique in
// the page (two widgets on one page must not share an id).

export function element(tag, attributes = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

export function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

let counter = 0;
export function unique(name) {
  counter += 1;
  return `book-live-${name}-${counter}`;
}
