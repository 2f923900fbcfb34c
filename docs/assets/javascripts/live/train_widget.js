// The attention playground, on the page: the reader picks a task and a model, presses Train,
// and watches the loss fall and the attention maps of every head form. The arithmetic is
// train.js's (the twin of attention_book/playground.py); this module only draws. book.js
// imports it when the reader presses the widget's Load button and calls mount(container),
// which fetches study.json (the build's PyTorch runs: the step at which each configuration
// was solved). Training runs in short chunks, so the page keeps answering the reader. The
// container's data-state says "ready" or "running"; window.bookLive.train holds the widget,
// its current Playground, and check(), the browser check's side.

import {
  DEFAULTS, EVAL_SIZE, Playground, POSITIONALS, SEPARATOR, SOLVED_ACCURACY, TASKS, check_case,
} from "./train.js";
import { element, escape, unique } from "./dom.js";

const here = new URL(".", import.meta.url);
const CHUNK_MS = 30; // train this long, then redraw and let the page answer
const MAPS_EVERY_MS = 250; // the heatmaps are redrawn at most this often while training
const STATUS_EVERY_MS = 500; // and the status line (a live region a screen reader reads)
const EVAL_SLICES = 8; // the accuracy is measured in slices of the 256 sequences, a pause between
const EXAMPLE = [3, 1, 4, 1, 5];

const pause = (ms = 0) => new Promise((done) => setTimeout(done, ms));
const count = (n) => n.toLocaleString("en-US");
const percent = (x) => `${(100 * x).toFixed(1)}%`;
const token_label = (t) => (t === SEPARATOR ? "|" : String(t));

function format_loss(loss) {
  return loss >= 0.01 ? loss.toFixed(3) : loss.toExponential(1);
}

function answer_of(task, digits) {
  return task === "reverse" ? digits.slice().reverse() : digits.slice().sort((x, y) => x - y);
}

// ---------------------------------------------------------------------------------------------
// Drawing: the loss curve and the attention maps, as inline SVG.

function decade_label(e) {
  if (e >= 0) return String(10 ** e);
  if (e >= -3) return (10 ** e).toFixed(-e);
  return `1e${e}`;
}

// The loss at every step, against the step, on a log scale; vertical lines mark where the
// reader's run and the build's PyTorch run were first measured solved.
function loss_chart(losses, max_steps, width, marks) {
  const height = 190, left = 46, right = 10, top = 10, bottom = 34;
  const last_step = Math.max(max_steps, losses.length);
  const finite = losses.filter((x) => x > 0 && Number.isFinite(x));
  const lo = Math.floor(Math.log10(Math.min(1, ...finite)));
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(1, ...finite))));
  const x = (step) => left + (width - left - right) * step / last_step;
  const y = (loss) => top + (height - top - bottom) * (hi - Math.log10(loss)) / (hi - lo);
  const parts = [];
  for (let e = lo; e <= hi; e++) {
    parts.push(`<line class="book-live__tick" x1="${left}" y1="${y(10 ** e)}" x2="${width - right}" y2="${y(10 ** e)}"></line>`,
               `<text x="${left - 4}" y="${y(10 ** e) + 3.5}" text-anchor="end">${decade_label(e)}</text>`);
    for (const m of hi - lo <= 2 && e < hi ? [2, 5] : []) { // a narrow range: 2 and 5 too
      const at = y(m * 10 ** e);
      parts.push(`<text x="${left - 4}" y="${at + 3.5}" text-anchor="end">${Number((m * 10 ** e).toPrecision(1))}</text>`);
    }
  }
  const every = [100, 250, 500, 1000, 2500, 5000].find((s) => last_step / s <= Math.max(3, (width - left) / 70)) || 10000;
  for (let s = 0; s <= last_step; s += every) {
    const anchor = x(s) > width - right - 12 ? "end" : "middle";
    parts.push(`<text x="${x(s)}" y="${height - bottom + 14}" text-anchor="${anchor}">${count(s)}</text>`);
  }
  parts.push(`<line class="book-live__axis" x1="${left}" y1="${height - bottom}" x2="${width - right}" y2="${height - bottom}"></line>`,
             `<line class="book-live__axis" x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}"></line>`,
             `<text x="${(left + width) / 2}" y="${height - 4}" text-anchor="middle">training step</text>`,
             `<text x="12" y="${(top + height - bottom) / 2}" text-anchor="middle" ` +
             `transform="rotate(-90 12 ${(top + height - bottom) / 2})">loss (log scale)</text>`);
  marks.forEach(({ step, label, kind }, k) => {
    if (step === null || step === undefined) return;
    const at = x(step).toFixed(1);
    parts.push(`<line class="book-live__mark-${kind}" x1="${at}" y1="${top}" x2="${at}" y2="${height - bottom}"></line>`,
               `<text x="${Number(at) + 3}" y="${top + 10 + 12 * k}">${escape(label)}</text>`);
  });
  if (finite.length) {
    const points = [];
    losses.forEach((loss, i) => { if (loss > 0) points.push(`${x(i + 1).toFixed(1)},${y(loss).toFixed(1)}`); });
    parts.push(`<polyline class="book-live__loss" points="${points.join(" ")}"></polyline>`);
  }
  const about = losses.length
    ? `The training loss at each of ${count(losses.length)} steps, on a log scale; at step ` +
      `${count(losses.length)} it is ${format_loss(losses.at(-1))}.`
    : "The training loss, on a log scale: no step trained yet.";
  return `<svg class="book-live__chart" viewBox="0 0 ${width} ${height}" style="max-width: ${width}px" ` +
         `role="img" aria-label="${escape(about)}">${parts.join("")}</svg>`;
}

// One head's weights (T, T, row-major: query row, key column) as a heatmap whose cells' opacity
// is the weight, its rows and columns labelled with the tokens. A line sets the answer's rows
// (from the separator on, where the model is scored) apart.
function heatmap(weights, labels, first_scored, description) {
  const T = labels.length, cell = 14, left = 16, top = 16;
  const size = left + cell * T + 2;
  const parts = [];
  labels.forEach((label, j) => {
    parts.push(`<text x="${left + cell * j + cell / 2}" y="${top - 5}" text-anchor="middle">${escape(label)}</text>`,
               `<text x="${left - 4}" y="${top + cell * j + cell / 2 + 3.5}" text-anchor="end">${escape(label)}</text>`);
  });
  for (let i = 0; i < T; i++) {
    for (let j = 0; j <= i; j++) { // a causal row ends at its own position
      parts.push(`<rect class="book-live__cell" x="${left + cell * j}" y="${top + cell * i}" width="${cell}" ` +
                 `height="${cell}" fill-opacity="${weights[i * T + j].toFixed(3)}"></rect>`);
    }
  }
  parts.push(`<rect class="book-live__grid" x="${left}" y="${top}" width="${cell * T}" height="${cell * T}"></rect>`,
             `<line class="book-live__axis" x1="${left - 2}" y1="${top + cell * first_scored}" ` +
             `x2="${left + cell * T}" y2="${top + cell * first_scored}"></line>`);
  return `<svg class="book-live__heatmap" viewBox="0 0 ${size} ${size}" role="img" ` +
         `aria-label="${escape(description)}">${parts.join("")}</svg>`;
}

// Where a head looks hardest from each scored row: "from | to 5 (position 5, weight 0.62), …".
function strongest(weights, labels, first_scored) {
  const T = labels.length, found = [];
  for (let i = first_scored; i < T; i++) {
    let best = 0;
    for (let j = 1; j <= i; j++) if (weights[i * T + j] > weights[i * T + best]) best = j;
    found.push(`from ${labels[i]} (position ${i + 1}) to ${labels[best]} (position ${best + 1}, ` +
               `weight ${weights[i * T + best].toFixed(2)})`);
  }
  return found.join("; ");
}

// ---------------------------------------------------------------------------------------------
// What the build measured (study.json) for a configuration, in words.

function find_study(study, config) {
  return study.configs.find((c) => c.task === config.task && c.num_blks === config.num_blks &&
    c.num_heads === config.num_heads && c.positional === config.positional) || null;
}

function build_sentence(study, found, seed) {
  if (!found) {
    return "The book's build did not train this configuration, so there is no PyTorch run to " +
           "compare this one with.";
  }
  const limit = count(study.max_steps);
  const outcomes = found.solved_at.every((s) => s === null) ? `none within ${limit}`
    : found.solved_at.map((s) => (s === null ? `not within ${limit}` : count(s))).join(", ");
  const all = `seeds ${study.seeds.join(", ")}: ${outcomes}`;
  const k = study.seeds.indexOf(seed);
  if (k < 0) {
    return `When the book was built, PyTorch trained this configuration with other seeds (${all}); ` +
           `seed ${seed} is a run of your own.`;
  }
  const solved = found.solved_at[k];
  const same = `With seed ${seed} your run repeats it step for step, to rounding (the same ` +
               "initial weights, the same batches, float64 arithmetic)";
  if (solved === null) {
    return `When the book was built, PyTorch did not solve it within ${limit} steps with seed ` +
           `${seed}: its accuracy was ${percent(found.final_accuracy[k])} at the end (${all}). ` +
           `${same}, so it should not be solved here either.`;
  }
  return `When the book was built, PyTorch solved it at step ${count(solved)} with seed ${seed} ` +
         `(${all}). ${same}, so it should be solved at step ${count(solved)} here too.`;
}

// ---------------------------------------------------------------------------------------------
// The widget.

export async function mount(container) {
  if (!document.querySelector("link[data-book-live]")) {
    const css = element("link", { rel: "stylesheet", href: new URL("live.css", here).href, "data-book-live": "" });
    document.head.append(css);
  }
  const response = await fetch(new URL("study.json", new URL(container.dataset.model, location.href)));
  if (!response.ok) throw new Error(`study.json: HTTP ${response.status}`);
  const study = await response.json();
  const max_steps = study.max_steps, eval_every = study.eval_every;

  const app = container.querySelector(".book-live__app");
  app.replaceChildren();
  const live = { container, playground: null, result: null, check: null, run: null };
  window.bookLive = window.bookLive || {};
  window.bookLive.train = live;
  live.check = async (reference) => {
    const results = [];
    for (const c of reference.cases) {
      results.push(check_case(c));
      await pause();
    }
    live.result = { cases: results };
    return live.result;
  };

  // The controls.
  const ids = { task: unique("task"), blks: unique("layers"), heads: unique("heads"),
                positional: unique("positions"), seed: unique("seed"), example: unique("example") };
  const picker = (id, label, options, value) => {
    const select = element("select", { id }, options.map(([v, name]) => element("option", { value: v, text: name })));
    select.value = String(value);
    return [element("label", { for: id, text: label }), select];
  };
  const pickers = element("div", { class: "book-live__controls book-live__pickers" }, [
    element("span", {}, picker(ids.task, "Task", TASKS.map((t) => [t, t === "reverse" ? "reverse the digits" : "sort the digits"]), DEFAULTS.task)),
    element("span", {}, picker(ids.blks, "Layers", [["1", "1"], ["2", "2"]], DEFAULTS.num_blks)),
    element("span", {}, picker(ids.heads, "Heads", [["1", "1"], ["2", "2"], ["4", "4"]], DEFAULTS.num_heads)),
    element("span", {}, picker(ids.positional, "Positions", POSITIONALS.map((p) => [p, p]), DEFAULTS.positional)),
    element("span", {}, [element("label", { for: ids.seed, text: "Seed" }),
      element("input", { id: ids.seed, type: "number", min: "0", max: "999", step: "1", value: String(DEFAULTS.seed) })]),
  ]);
  const button = (name, text) => element("button", { type: "button", class: `md-button book-live__${name}`, text });
  const buttons = {
    train: button("train", "Train"), pause: button("pause", "Pause"),
    step: button("step", "Step"), reset: button("reset", "Reset"),
  };
  const actions = element("div", { class: "book-live__controls book-live__actions" }, Object.values(buttons));
  const status = element("p", { class: "book-live__status", role: "status", "aria-live": "polite" });
  const built = element("p", { class: "book-live__note book-live__study" });
  const chart = element("div", { class: "book-live__picture book-live__curve" });
  const example_input = element("input", { id: ids.example, type: "text", inputmode: "numeric", maxlength: "5",
    pattern: "[0-9]{5}", autocomplete: "off", spellcheck: "false", value: EXAMPLE.join("") });
  const example = element("p", { class: "book-live__form book-live__example" }, [
    element("label", { for: ids.example, text: "Example digits (five)" }), example_input]);
  const legend = element("p", { class: "book-live__note", text: "Each map is one head: its rows are the " +
    "positions that look (queries), its columns the positions they look at (keys), and a cell is as dark " +
    "as its attention weight (each row sums to 1; the causal mask leaves the upper right empty). The " +
    "model is scored on the rows below the line, from the separator | on." });
  const maps = element("div", { class: "book-live__maps" });
  const answer = element("p", { class: "book-live__answer" });
  app.append(pickers, actions, status, built, chart, example, legend, maps, answer);
  const controls = {
    task: app.querySelector(`#${ids.task}`), blks: app.querySelector(`#${ids.blks}`),
    heads: app.querySelector(`#${ids.heads}`), positional: app.querySelector(`#${ids.positional}`),
    seed: app.querySelector(`#${ids.seed}`),
  };

  // The run: the model, what was measured of it, and whether it is training.
  let run = null, running = false, generation = 0, example_digits = EXAMPLE.slice();
  let status_at = 0, maps_at = 0, measuring = Promise.resolve();

  function build() {
    const seed = Number(controls.seed.value);
    const config = {
      ...DEFAULTS, task: controls.task.value, num_blks: Number(controls.blks.value),
      num_heads: Number(controls.heads.value), positional: controls.positional.value, seed,
    };
    const playground = new Playground(config);
    const found = find_study(study, config), k = study.seeds.indexOf(seed);
    run = { playground, accuracies: [], solved_at: null, ms_per_step: null, study: found,
            build_solved_at: found && k >= 0 ? found.solved_at[k] : undefined };
    live.playground = playground;
    live.run = run;
    built.textContent = build_sentence(study, found, seed);
  }

  // The accuracy on the 256 evaluation sequences, as playground.accuracy() measures it, in
  // slices with a pause between (the whole takes about 100 ms). Null if the run changed.
  // Step and Train wait for it (`measuring`); Reset does not.
  async function measure(own) {
    let done;
    measuring = new Promise((resolve) => { done = resolve; });
    try {
      const { evaluation } = own.playground, L = own.playground.config.num_digits, T = 2 * L;
      const size = EVAL_SIZE / EVAL_SLICES;
      let right = 0;
      for (let s = 0; s < EVAL_SLICES; s++) {
        const slice = {
          tokens: evaluation.tokens.subarray(s * size * T, (s + 1) * size * T),
          answers: evaluation.answers.subarray(s * size * L, (s + 1) * size * L),
          batch_size: size,
        };
        right += Math.round(own.playground.accuracy(slice) * size * L);
        if (s < EVAL_SLICES - 1) {
          await pause();
          if (run !== own) return null;
        }
      }
      return right / (EVAL_SIZE * L);
    } finally {
      done();
    }
  }

  function record(own, accuracy) {
    const step = own.playground.steps;
    own.accuracies.push([step, accuracy]);
    if (own.solved_at === null && accuracy >= SOLVED_ACCURACY) own.solved_at = step;
  }

  function draw_status() {
    const { playground, accuracies, solved_at, ms_per_step, build_solved_at } = run;
    const parts = [`Step ${count(playground.steps)} of ${count(max_steps)}`];
    if (playground.losses.length) parts.push(`loss ${format_loss(playground.losses.at(-1))}`);
    if (accuracies.length) {
      const [step, accuracy] = accuracies.at(-1);
      parts.push(`accuracy ${percent(accuracy)} (at step ${count(step)})`);
    }
    if (ms_per_step !== null) parts.push(`${ms_per_step.toFixed(1)} ms per step in this browser`);
    let text = parts.join(", ") + ".";
    if (solved_at !== null) {
      const same = build_solved_at === undefined ? ""
        : build_solved_at === solved_at ? ", as PyTorch did"
        : ` (PyTorch: ${build_solved_at === null ? "not solved" : `step ${count(build_solved_at)}`})`;
      text += ` Solved at step ${count(solved_at)}${same}.`;
    } else if (playground.steps >= max_steps) {
      text += ` Not solved within ${count(max_steps)} steps` +
        (build_solved_at === null ? ", as in PyTorch." : ".");
    } else if (playground.steps === 0) {
      text += " Press Train to start, or Step for one step.";
    }
    if (playground.steps >= max_steps && !running) {
      text += ` That is the build's limit: Step goes on one step at a time, Reset starts over.`;
    }
    status.textContent = text;
    status_at = performance.now();
  }

  function draw_chart() {
    const width = Math.round(Math.min(720, Math.max(280, chart.clientWidth || 480)));
    const marks = [];
    if (run.build_solved_at !== undefined && run.build_solved_at !== null) {
      marks.push({ step: run.build_solved_at, label: "PyTorch solved it", kind: "build" });
    }
    if (run.solved_at !== null) marks.push({ step: run.solved_at, label: "solved here", kind: "own" });
    chart.innerHTML = loss_chart(run.playground.losses, max_steps, width, marks);
  }

  function draw_maps() {
    const { playground } = run, { task, num_digits } = playground.config;
    const truth = answer_of(task, example_digits);
    const sequence = [...example_digits, SEPARATOR, ...truth.slice(0, -1)];
    const labels = sequence.map(token_label);
    const seen = playground.look_at(Int32Array.from(sequence));
    const figures = [];
    seen.weights.forEach((heads, b) => heads.forEach((weights, h) => {
      const name = `Layer ${b + 1}, head ${h + 1}`;
      const description = `Attention weights of ${name.toLowerCase()} on ${example_digits.join(" ")} | ` +
        `${truth.slice(0, -1).join(" ")}: the strongest weight of each scored row goes ` +
        `${strongest(weights, labels, num_digits)}.`;
      figures.push(`<figure class="book-live__map">${heatmap(weights, labels, num_digits, description)}` +
                   `<figcaption>${name}</figcaption></figure>`);
    }));
    maps.innerHTML = figures.join("");
    const right = seen.answer.filter((d, t) => d === truth[t]).length;
    answer.textContent = `Reading ${example_digits.join(" ")} | and, at each step, the right digits so far, ` +
      `the model writes ${seen.answer.join(" ")}; the answer is ${truth.join(" ")} ` +
      `(${right} of ${num_digits} right).`;
    maps_at = performance.now();
  }

  function draw_buttons() {
    const at_end = run.playground.steps >= max_steps;
    buttons.train.disabled = running || at_end;
    buttons.pause.disabled = !running;
    buttons.step.disabled = running;
  }

  function draw(all = true) {
    const now = performance.now();
    draw_chart();
    if (all || now - status_at >= STATUS_EVERY_MS) draw_status();
    if (all || now - maps_at >= MAPS_EVERY_MS) draw_maps();
  }

  // Change the buttons; if that disables the one with the focus, move it to the one that
  // takes its place, so that a keyboard reader is not sent back to the top of the page.
  function hand_focus(from, to, change) {
    const had = document.activeElement === from;
    change();
    if (had) to.focus();
  }

  function stop() {
    running = false;
    generation += 1;
    container.dataset.state = "ready";
    draw_buttons();
  }

  async function train() {
    await measuring;
    if (running || run.playground.steps >= max_steps) return;
    running = true;
    const own = run, mine = ++generation;
    container.dataset.state = "running";
    hand_focus(buttons.train, buttons.pause, draw_buttons);
    while (generation === mine && own.playground.steps < max_steps) {
      const start = performance.now();
      let steps = 0, ms = 0, evaluate = false;
      while (performance.now() - start < CHUNK_MS && own.playground.steps < max_steps) {
        const t0 = performance.now();
        own.playground.step();
        ms += performance.now() - t0;
        steps += 1;
        if (own.playground.steps % eval_every === 0) {
          evaluate = true;
          break;
        }
      }
      own.ms_per_step = ms / steps;
      if (evaluate) {
        const accuracy = await measure(own);
        if (accuracy === null) return; // reset while measuring
        record(own, accuracy);
      }
      // At once, and in full, when just solved or paused while measuring.
      draw(generation !== mine || (evaluate && own.solved_at === own.playground.steps));
      await pause();
    }
    if (generation === mine) { // reached max_steps
      hand_focus(buttons.pause, buttons.reset, stop);
      draw();
    }
  }

  async function step_once() {
    await measuring;
    if (running) return;
    const own = run;
    const t0 = performance.now();
    own.playground.step();
    own.ms_per_step = performance.now() - t0;
    if (own.playground.steps % eval_every === 0) {
      const accuracy = await measure(own);
      if (accuracy === null) return; // reset while measuring
      record(own, accuracy);
    }
    draw();
  }

  function reset() {
    hand_focus(buttons.pause, buttons.train, stop);
    build();
    draw_buttons();
    draw();
  }

  buttons.train.addEventListener("click", () => { train(); });
  buttons.pause.addEventListener("click", () => {
    hand_focus(buttons.pause, buttons.train, stop);
    draw();
  });
  buttons.step.addEventListener("click", () => { step_once(); });
  buttons.reset.addEventListener("click", reset);
  for (const control of [controls.task, controls.blks, controls.heads, controls.positional]) {
    control.addEventListener("change", reset);
  }
  controls.seed.addEventListener("change", () => {
    const seed = Number(controls.seed.value);
    const valid = controls.seed.value !== "" && Number.isInteger(seed) && seed >= 0 && seed <= 999;
    controls.seed.setAttribute("aria-invalid", String(!valid));
    if (!valid) {
      status.textContent = "The seed is a whole number from 0 to 999.";
      return;
    }
    reset();
  });
  example_input.addEventListener("input", () => {
    const digits = example_input.value.trim();
    const valid = /^[0-9]{5}$/.test(digits);
    example_input.setAttribute("aria-invalid", String(!valid));
    if (!valid) return;
    example_digits = [...digits].map(Number);
    draw_maps();
  });

  build();
  draw_buttons();
  draw();
  // The chart is drawn at the width it has: draw it again when that changes (a phone turned).
  let chart_width = chart.clientWidth;
  new ResizeObserver(() => {
    if (chart.clientWidth !== chart_width) {
      chart_width = chart.clientWidth;
      draw_chart();
    }
  }).observe(chart);
  container.dataset.state = "ready";
  // The Load button had the focus and is gone: a keyboard reader goes on in the widget's box.
  if (!document.activeElement || document.activeElement === document.body) {
    controls.task.focus({ preventScroll: true });
  }
}
