// The live widgets of two chapters: the Transformer's translator and the optimizations
// chapter's character GPT, run in the reader's browser from the weights the build exported
// (booktools/live/export.py). book.js imports this module only when the reader presses a
// widget's Load button, then calls mount(container); the models' code is imported here, per
// widget. What a widget computed is kept in window.bookLive[kind].result (the browser check
// compares it with PyTorch's), and the container's data-state says "ready", "running", "done"
// or "error".

import { element, escape, unique } from "./dom.js";
import { load_state_dict } from "./layers.js";

const here = new URL(".", import.meta.url);

// Give the browser a moment to paint and to answer the reader (a long run stays responsive).
const pause = (ms = 0) => new Promise((done) => setTimeout(done, ms));

async function fetch_ok(url, kind) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return kind === "json" ? response.json() : response.arrayBuffer();
}

export async function mount(container) {
  if (!document.querySelector("link[data-book-live]")) {
    const css = element("link", { rel: "stylesheet", href: new URL("live.css", here).href, "data-book-live": "" });
    document.head.append(css);
  }
  const base = new URL(container.dataset.model, location.href);
  const [manifest, buffer] = await Promise.all([
    fetch_ok(new URL("model.json", base), "json"),
    fetch_ok(new URL("weights.bin", base), "buffer"),
  ]);
  const params = load_state_dict(manifest, buffer);
  const app = container.querySelector(".book-live__app");
  app.replaceChildren();
  window.bookLive = window.bookLive || {};
  const live = { container, result: null };
  window.bookLive[manifest.kind] = live;
  if (manifest.kind === "translator") {
    const [text, transformer] = await Promise.all([import("./text.js"), import("./transformer.js")]);
    mount_translator(app, live, manifest, transformer.translator(manifest, params), text, transformer);
  } else {
    const gpt = await import("./gpt.js");
    mount_gpt(app, live, manifest, gpt.gpt(manifest, params), gpt);
  }
  container.dataset.state = container.dataset.state === "done" ? "done" : "ready";
  // The Load button had the focus and is gone: a keyboard reader goes on in the widget's box.
  if (!document.activeElement || document.activeElement === document.body) {
    app.querySelector("input").focus({ preventScroll: true });
  }
}

// ---------------------------------------------------------------------------------------------
// A heatmap of attention weights, as an SVG: rows are queries, columns keys.

function heatmap(weights, row_labels, column_labels, current_row, description) {
  const cell = 16, left = 8 + 6.2 * Math.max(...row_labels.map((l) => l.length), 4);
  const top = 8 + 5.4 * Math.max(...column_labels.map((l) => l.length), 4);
  const width = left + cell * column_labels.length + 0.5 * top, height = top + cell * row_labels.length + 4;
  const parts = [];
  column_labels.forEach((label, j) => {
    const x = left + cell * j + cell / 2 + 3, y = top - 4;
    parts.push(`<text x="${x}" y="${y}" transform="rotate(-60 ${x} ${y})">${escape(label)}</text>`);
  });
  row_labels.forEach((label, i) => {
    parts.push(`<text x="${left - 4}" y="${top + cell * i + cell / 2 + 3.5}" text-anchor="end">${escape(label)}</text>`);
  });
  weights.forEach((row, i) => {
    for (let j = 0; j < column_labels.length; j++) {
      const w = row && j < row.length ? row[j] : 0;  // a causal row ends at its own step
      parts.push(`<rect class="book-live__cell" x="${left + cell * j}" y="${top + cell * i}" ` +
                 `width="${cell}" height="${cell}" fill-opacity="${w.toFixed(3)}"></rect>`);
    }
  });
  parts.push(`<rect class="book-live__grid" x="${left}" y="${top}" width="${cell * column_labels.length}" ` +
             `height="${cell * row_labels.length}"></rect>`);
  if (current_row !== null) {
    parts.push(`<rect class="book-live__current" x="${left - 1}" y="${top + cell * current_row - 1}" ` +
               `width="${cell * column_labels.length + 2}" height="${cell + 2}"></rect>`);
  }
  return `<svg class="book-live__heatmap" viewBox="0 0 ${width.toFixed(0)} ${height.toFixed(0)}" ` +
         `style="max-width: ${Math.min(width * 1.4, 720).toFixed(0)}px" role="img" ` +
         `aria-label="${escape(description)}">${parts.join("")}</svg>`;
}

function strongest(row, labels) {
  let best = 0;
  for (let j = 1; j < labels.length; j++) if (row[j] > row[best]) best = j;
  return `«${labels[best]}» (weight ${row[best].toFixed(2)})`;
}

// ---------------------------------------------------------------------------------------------
// The translator

const ATTENTIONS = [
  ["cross", "encoder-decoder attention"],
  ["decoder_self", "masked decoder self-attention"],
  ["encoder", "encoder self-attention"],
];

function mount_translator(app, live, manifest, model, text, transformer) {
  const { config } = manifest;
  const src_vocab = new text.Vocab(manifest.src_vocab), tgt_vocab = new text.Vocab(manifest.tgt_vocab);
  const ids = { input: unique("sentence"), kind: unique("attention"), block: unique("block"),
                head: unique("head"), step: unique("step") };
  const input = element("input", { id: ids.input, type: "text", autocomplete: "off", spellcheck: "false",
                                   value: app.closest(".book-live").dataset.example || "" });
  const button = element("button", { type: "submit", class: "md-button", text: "Translate" });
  const form = element("form", { class: "book-live__form" }, [
    element("label", { for: ids.input, text: "English sentence" }), input, button]);
  const source = element("p", { class: "book-live__tokens" });
  const select = (id, label, options) => element("label", { for: id }, [
    `${label} `,
    element("select", { id }, options.map(([value, name]) => element("option", { value, text: name }))),
  ]);
  const numbers = (count) => Array.from({ length: count }, (_, i) => [String(i), String(i + 1)]);
  const step = element("input", { id: ids.step, type: "range", min: "1", max: "1", value: "1" });
  const step_label = element("output", { for: ids.step });
  const controls = element("div", { class: "book-live__controls" }, [
    select(ids.kind, "Attention", ATTENTIONS),
    select(ids.block, "Block", numbers(config.num_blks)),
    select(ids.head, "Head", numbers(config.num_heads)),
    element("label", { for: ids.step }, ["Step ", step]), step_label,
  ]);
  const translation = element("p", { class: "book-live__translation", "aria-live": "polite" });
  const picture = element("div", { class: "book-live__picture" });
  const status = element("p", { class: "book-live__status", role: "status" });
  app.append(form, source, translation, controls, picture, status);
  const [kind, block, head] = [ids.kind, ids.block, ids.head].map((id) => app.querySelector(`#${id}`));
  let shown = null, animation = null;

  function draw() {
    if (!shown) return;
    const t = Number(step.value) - 1, r = shown;
    const b = Number(block.value), h = Number(head.value);
    const inputs = ["<bos>", ...r.words.slice(0, -1)];
    let weights, rows, columns, current, about;
    if (kind.value === "encoder") {
      weights = r.encoder[b][h]; rows = r.labels; columns = r.labels; current = null;
      about = `every source token looks at every other`;
    } else if (kind.value === "decoder_self") {
      weights = r.steps.slice(0, t + 1).map((s) => s.decoder_self[b][h]);
      rows = inputs.slice(0, t + 1); columns = inputs.slice(0, t + 1); current = t;
      about = `at step ${t + 1} the decoder reads «${inputs[t]}» and looks most at ${strongest(weights[t], columns)}`;
    } else {
      weights = r.steps.slice(0, t + 1).map((s) => s.cross[b][h]);
      rows = r.words.slice(0, t + 1); columns = r.labels; current = t;
      about = `at step ${t + 1} the decoder writes «${r.words[t]}» and looks most at source ${strongest(weights[t], columns)}`;
    }
    const name = ATTENTIONS.find(([value]) => value === kind.value)[1];
    const description = `${name}, block ${b + 1}, head ${h + 1}: ${about}.`;
    picture.innerHTML = heatmap(weights, rows, columns, current, description) +
      `<p class="book-live__caption">${escape(description)}</p>`;
    step_label.textContent = `${t + 1} of ${r.words.length}`;
    translation.innerHTML = r.words.map((word, k) =>
      `<span class="${k === t ? "book-live__now" : k > t ? "book-live__later" : ""}">${escape(word)}</span>`,
    ).join(" ");
  }

  function translate() {
    const words = text.tokenize(input.value);
    if (words.length === 0) {
      status.textContent = "Type a sentence first.";
      return;
    }
    live.container.dataset.state = "running";
    const src = text.source_indices(words, src_vocab, config.num_steps);
    const start = performance.now();
    const out = transformer.greedy_decode(model, src, tgt_vocab.bos, tgt_vocab.eos, config.max_decode_len);
    const ms = performance.now() - start;
    const tokens = out.steps.map((s) => s.token);
    const source_tokens = src_vocab.to_tokens(src);
    const shown_words = [...words, "<eos>"].slice(0, src.length);  // as source_indices cut it
    const labels = shown_words.map((word, k) => (src[k] === src_vocab.unk ? `${word}*` : word));
    shown = { ...out, labels, words: tgt_vocab.to_tokens(tokens) };
    live.result = {
      sentence: input.value, source_tokens, source_ids: src, tokens, words: shown.words,
      logits: out.steps.map((s) => Array.from(s.logits)),
      encoder: out.encoder,
      decoder_self: out.steps.map((s) => s.decoder_self),
      cross: out.steps.map((s) => s.cross),
      ms, encoder_ms: out.encoder_ms, step_ms: out.steps.map((s) => s.ms),
    };
    const unknown = shown_words.filter((_, k) => src[k] === src_vocab.unk);
    source.innerHTML = "Source tokens: " + shown_words.map((word, k) => src[k] === src_vocab.unk
      ? `<span class="book-live__unk" title="not in the vocabulary: the model reads <unk>">${escape(word)}*</span>`
      : `<span>${escape(word)}</span>`).join(" ") +
      (unknown.length ? ` <span class="book-live__note">(* not in the vocabulary: the model reads &lt;unk&gt;)</span>` : "") +
      (words.length + 1 > src.length ? ` <span class="book-live__note">(cut to ${config.num_steps} tokens, as in training)</span>` : "");
    status.textContent = `Translated in ${ms.toFixed(1)} ms: ${tokens.length} tokens, ` +
      `${(ms / tokens.length).toFixed(2)} ms per token in this browser (the encoder took ${out.encoder_ms.toFixed(1)} ms).`;
    step.max = String(tokens.length);
    live.container.dataset.state = "done";
    animate();
  }

  function animate() {
    clearInterval(animation);
    const reduced = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    step.value = reduced ? step.max : "1";
    draw();
    if (reduced) return;
    animation = setInterval(() => {
      if (Number(step.value) >= Number(step.max)) {
        clearInterval(animation);
        return;
      }
      step.value = String(Number(step.value) + 1);
      draw();
    }, 250);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    translate();
  });
  step.addEventListener("input", () => {
    clearInterval(animation);
    draw();
  });
  for (const control of [kind, block, head]) control.addEventListener("change", draw);
  block.value = String(config.num_blks - 1);
  translate();
}

// ---------------------------------------------------------------------------------------------
// The character GPT

function mount_gpt(app, live, manifest, model, gpt) {
  const { config } = manifest, vocab = manifest.vocab, index = new Map(vocab.map((c, i) => [c, i]));
  const ids = { prompt: unique("prompt"), count: unique("count") };
  const prompt = element("input", { id: ids.prompt, type: "text", autocomplete: "off", spellcheck: "false",
                                    value: app.closest(".book-live").dataset.example || "" });
  const count = element("input", { id: ids.count, type: "number", min: "1", max: "300", value: "200" });
  const button = element("button", { type: "submit", class: "md-button", text: "Generate" });
  const form = element("form", { class: "book-live__form" }, [
    element("label", { for: ids.prompt, text: "French prompt" }), prompt,
    element("label", { for: ids.count, text: "Characters" }), count, button]);
  const output = element("pre", { class: "book-live__text" });
  const legend = element("p", { class: "book-live__note", text: `The prompt is underlined; the characters ` +
    `past position ${config.trained_length} (the length of the training windows) are in italics: ` +
    "the model never learned to predict there." });
  const table = element("table");
  const chart = element("div", { class: "book-live__picture" });
  const status = element("p", { class: "book-live__status", role: "status" });
  app.append(form, output, legend, table, chart, status);
  let running = false;

  function show_times(runs, total) {
    const rows = runs.map(({ name, ms }) => {
      const sum = ms.reduce((a, b) => a + b, 0);
      const per = ms.length ? (sum / ms.length).toFixed(2) : "…";
      return `<tr><th scope="row">${name}</th><td>${per}</td><td>${sum.toFixed(0)}</td></tr>`;
    });
    const done = Math.min(...runs.map((run) => run.ms.length));
    table.innerHTML = `<caption>Time per character in this browser (${done} of ${total} characters)</caption>` +
      "<thead><tr><th scope=\"col\">run</th><th scope=\"col\">ms per character</th>" +
      `<th scope="col">total ms</th></tr></thead><tbody>${rows.join("")}</tbody>`;
    // Drawn at the width it is shown (one unit, one pixel), so its text stays legible.
    const width = Math.round(Math.min(600, Math.max(280, chart.clientWidth || 480)));
    const height = 150, left = 40, bottom = 24;
    const longest = Math.max(1, ...runs.flatMap((run) => run.ms));
    const lines = runs.map(({ ms }, k) => {
      const points = ms.map((value, t) => `${(left + (width - left - 4) * t / Math.max(1, total - 1)).toFixed(1)},` +
                                         `${(height - bottom - (height - bottom - 6) * value / longest).toFixed(1)}`);
      return `<polyline class="book-live__line-${k}" points="${points.join(" ")}"></polyline>`;
    });
    chart.innerHTML = `<svg class="book-live__chart" viewBox="0 0 ${width} ${height}" style="max-width: ${width}px" ` +
      `role="img" aria-label="Milliseconds per generated character against its position: ` +
      `${escape(runs.map((r) => r.name).join(" and "))}">` +
      `<line class="book-live__axis" x1="${left}" y1="${height - bottom}" x2="${width}" y2="${height - bottom}"></line>` +
      `<line class="book-live__axis" x1="${left}" y1="6" x2="${left}" y2="${height - bottom}"></line>` +
      `<text x="${left - 4}" y="12" text-anchor="end">${longest.toFixed(1)}</text>` +
      `<text x="${left - 4}" y="${height - bottom}" text-anchor="end">0</text>` +
      `<text x="${(left + width) / 2}" y="${height - 4}" text-anchor="middle">ms per character, against its position</text>` +
      lines.join("") +
      runs.map(({ name }, k) => `<text class="book-live__label-${k}" x="${left + 8}" y="${16 + 13 * k}">${escape(name)}</text>`).join("") +
      "</svg>";
  }

  async function run(prompt_ids, total, use_cache, record, on_step) {
    const steps = gpt.generate(model, prompt_ids, total, use_cache);
    let waited = performance.now();
    for (const step of steps) {
      record(step);
      if (performance.now() - waited > 40) {  // let the page paint and answer the reader
        on_step();
        await pause();
        waited = performance.now();
      }
    }
    on_step();
  }

  async function generate() {
    if (running) return;
    const text = prompt.value;
    const unknown = [...new Set([...text].filter((c) => !index.has(c)))];
    const total = Math.round(Number(count.value));
    if (text.length === 0 || unknown.length || !(total >= 1 && total <= 300)) {
      status.textContent = text.length === 0 ? "Type a prompt first." : unknown.length
        ? `The model knows ${vocab.length} characters; not these: ${unknown.map((c) => `«${c}»`).join(" ")}. ` +
          "Its training text is the French side of the book's corpus."
        : "Ask for 1 to 300 characters.";
      live.container.dataset.state = "error";
      return;
    }
    running = true;
    live.container.dataset.state = "running";
    const prompt_ids = [...text].map((c) => index.get(c));
    const cached = { name: "with the key/value cache", ms: [], tokens: [], logits: [], weights: [] };
    const plain = { name: "without the cache", ms: [], tokens: [], logits: [] };
    // Characters past the length of the training windows are shown apart: the model never
    // learned to predict there.
    const trained = Math.max(0, config.trained_length - prompt_ids.length);
    const render = (run_tokens) => {
      const chars = run_tokens.map((t) => vocab[t]);
      output.innerHTML = `<span class="book-live__prompt">${escape(text)}</span>` +
        escape(chars.slice(0, trained).join("")) +
        (chars.length > trained ? `<span class="book-live__beyond">${escape(chars.slice(trained).join(""))}</span>` : "");
    };
    status.textContent = "Generating with the key/value cache…";
    await run(prompt_ids, total, true, (step) => {
      cached.ms.push(step.ms); cached.tokens.push(step.token);
      cached.logits.push(Array.from(step.logits)); cached.weights.push(step.weights);
    }, () => { render(cached.tokens); show_times([cached, plain], total); });
    status.textContent = "Generating again without the cache (each step runs the whole text so far)…";
    await pause();
    await run(prompt_ids, total, false, (step) => {
      plain.ms.push(step.ms); plain.tokens.push(step.token); plain.logits.push(Array.from(step.logits));
    }, () => show_times([cached, plain], total));
    const same = cached.tokens.length === plain.tokens.length && cached.tokens.every((t, k) => t === plain.tokens[k]);
    const mean = (ms) => ms.reduce((a, b) => a + b, 0) / ms.length;
    status.textContent = `${same ? "Both runs generated the same" : "The two runs differ! They should give the same"} ` +
      `${total} characters: ${mean(cached.ms).toFixed(2)} ms per character with the cache, ` +
      `${mean(plain.ms).toFixed(2)} ms without, in this browser.`;
    live.result = {
      prompt: text, prompt_ids, tokens: cached.tokens, tokens_without_cache: plain.tokens,
      logits: cached.logits, logits_without_cache: plain.logits, weights: cached.weights,
      ms_with_cache: cached.ms, ms_without_cache: plain.ms, same,
    };
    live.container.dataset.state = "done";
    running = false;
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    generate();
  });
}
