// The FlashAttention chapter's forward pass on the reader's own GPU, through WebGPU: the tiled
// kernel of attention_book/flash/reference.py (tiled_attention_forward, _attend_query_block)
// written in WGSL, beside naive_attention, which writes the whole score matrix to GPU memory.
// book.js imports this module only when the reader presses the widget's button, then calls
// mount(container). It fetches PyTorch's outputs for a few cases (reference.json, written by
// booktools/live/flash.py), runs both kernels on them and shows the largest differences; a
// second button times both kernels for growing n. Without WebGPU the same two algorithms run
// in JavaScript on the CPU. What it computed is kept in window.bookLive.flash.result (the
// browser check compares it with PyTorch's), and the container's data-state says "running",
// "done" or "error".

import { element } from "./dom.js";

export const BLOCK_M = 16; // queries per workgroup: one invocation per query row
export const BLOCK_N = 16; // keys and values per tile staged in workgroup memory
const NEG = "-1e30"; // the score of a masked key (finite: exp(NEG - m) is 0, never NaN)

// ---------------------------------------------------------------------------------------------
// The kernels, in WGSL. Head dim and causality are constants of each compiled pipeline, as
// Triton specializes its kernel on HEAD_DIM and CAUSAL.

const HEADER = (head_dim, causal) => `
const BLOCK_M: u32 = ${BLOCK_M}u;
const BLOCK_N: u32 = ${BLOCK_N}u;
const HEAD_DIM: u32 = ${head_dim}u;
const CAUSAL: bool = ${causal};
const NEG: f32 = ${NEG};
struct Shape { length: u32, scale: f32 }
@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
`;

// tiled_attention_forward: one workgroup per block of BLOCK_M queries (_attend_query_block),
// one invocation per query row, holding its m_i, l_i and acc in registers.
export const tiled_kernel = (head_dim, causal) => HEADER(head_dim, causal) + `
var<workgroup> k_j: array<f32, ${BLOCK_N * head_dim}>; // one tile of keys, BLOCK_N x HEAD_DIM
var<workgroup> v_j: array<f32, ${BLOCK_N * head_dim}>; // and of values

@compute @workgroup_size(BLOCK_M)
fn attend_query_block(@builtin(workgroup_id) block: vec3<u32>,
                      @builtin(local_invocation_index) row: u32) {
  let n = shape.length;
  let start_m = block.x * BLOCK_M;
  let i = start_m + row; // this invocation's query (past n in the last block: computes, writes nothing)
  var q_i: array<f32, HEAD_DIM>;
  for (var c = 0u; c < HEAD_DIM; c++) { q_i[c] = q[min(i, n - 1u) * HEAD_DIM + c] * shape.scale; }
  var m_i = NEG; // running max
  var l_i = 0.0; // running sum of exponentials, relative to m_i
  var acc: array<f32, HEAD_DIM>; // unnormalized output (zeros)
  var s_ij: array<f32, BLOCK_N>;
  var end_n = n;
  if (CAUSAL) { end_n = min(n, start_m + BLOCK_M); } // key tiles wholly in the future: skipped
  for (var start_n = 0u; start_n < end_n; start_n += BLOCK_N) {
    // Stage K_j and V_j in workgroup memory, each invocation loading a share.
    for (var e = row; e < BLOCK_N * HEAD_DIM; e += BLOCK_M) {
      let at = min(start_n + e / HEAD_DIM, n - 1u) * HEAD_DIM + e % HEAD_DIM;
      k_j[e] = k[at];
      v_j[e] = v[at];
    }
    workgroupBarrier();
    var m_new = m_i;
    for (var j = 0u; j < BLOCK_N; j++) {
      let key = start_n + j;
      var s = 0.0;
      for (var c = 0u; c < HEAD_DIM; c++) { s += q_i[c] * k_j[j * HEAD_DIM + c]; }
      let visible = key < n && (!CAUSAL || key <= i);
      s_ij[j] = select(NEG, s, visible);
      m_new = max(m_new, s_ij[j]);
    }
    let alpha = exp(m_i - m_new); // rescales what was summed with the old max
    l_i *= alpha;
    for (var c = 0u; c < HEAD_DIM; c++) { acc[c] *= alpha; }
    for (var j = 0u; j < BLOCK_N; j++) {
      let p_ij = select(0.0, exp(s_ij[j] - m_new), s_ij[j] > NEG);
      l_i += p_ij;
      for (var c = 0u; c < HEAD_DIM; c++) { acc[c] += p_ij * v_j[j * HEAD_DIM + c]; }
    }
    m_i = m_new;
    workgroupBarrier(); // every invocation is done with this tile before the next overwrites it
  }
  if (i < n) {
    for (var c = 0u; c < HEAD_DIM; c++) { out[i * HEAD_DIM + c] = acc[c] / l_i; }
  }
}
`;

// naive_attention: three passes through a (n, n) matrix in GPU memory, as PyTorch's eager
// `softmax(q @ k.T * scale) @ v` makes them.
export const naive_kernel = (head_dim, causal) => HEADER(head_dim, causal) + `
@group(0) @binding(5) var<storage, read_write> scores: array<f32>; // n x n

@compute @workgroup_size(16, 16)
fn naive_scores(@builtin(global_invocation_id) id: vec3<u32>) {
  let n = shape.length;
  let i = id.y;
  let j = id.x;
  if (i >= n || j >= n) { return; }
  var s = 0.0;
  for (var c = 0u; c < HEAD_DIM; c++) { s += q[i * HEAD_DIM + c] * k[j * HEAD_DIM + c]; }
  scores[i * n + j] = select(NEG, s * shape.scale, !CAUSAL || j <= i);
}

@compute @workgroup_size(64)
fn naive_softmax(@builtin(global_invocation_id) id: vec3<u32>) {
  let n = shape.length;
  let i = id.x;
  if (i >= n) { return; }
  var m = NEG;
  for (var j = 0u; j < n; j++) { m = max(m, scores[i * n + j]); }
  var l = 0.0;
  for (var j = 0u; j < n; j++) { l += exp(scores[i * n + j] - m); }
  for (var j = 0u; j < n; j++) { scores[i * n + j] = exp(scores[i * n + j] - m) / l; }
}

@compute @workgroup_size(64)
fn naive_output(@builtin(global_invocation_id) id: vec3<u32>) {
  let n = shape.length;
  let i = id.x / HEAD_DIM;
  let c = id.x % HEAD_DIM;
  if (i >= n) { return; }
  var o = 0.0;
  for (var j = 0u; j < n; j++) { o += scores[i * n + j] * v[j * HEAD_DIM + c]; }
  out[i * HEAD_DIM + c] = o;
}
`;

// ---------------------------------------------------------------------------------------------
// Running them: one device, one pipeline per (kernel, head dim, causal), buffers per length.

const ceil = (a, b) => Math.ceil(a / b);

class Kernels {
  constructor(device) {
    this.device = device;
    this.pipelines = new Map();
  }

  pipeline(kind, entry, head_dim, causal) {
    const key = `${kind}/${entry}/${head_dim}/${causal}`;
    if (!this.pipelines.has(key)) {
      const code = (kind === "tiled" ? tiled_kernel : naive_kernel)(head_dim, causal);
      const module = this.device.createShaderModule({ code });
      // An explicit layout: each naive pass binds all six buffers, whichever it reads.
      const types = ["uniform", "read-only-storage", "read-only-storage", "read-only-storage", "storage", "storage"];
      const entries = types.slice(0, kind === "tiled" ? 5 : 6).map((type, binding) => ({
        binding, visibility: GPUShaderStage.COMPUTE, buffer: { type },
      }));
      const group = this.device.createBindGroupLayout({ entries });
      this.pipelines.set(key, this.device.createComputePipeline({
        layout: this.device.createPipelineLayout({ bindGroupLayouts: [group] }),
        compute: { module, entryPoint: entry },
      }));
    }
    return this.pipelines.get(key);
  }

  // Buffers for one length, and the passes of each kernel (encoded again for every call).
  prepare(q, k, v, n, head_dim, causal) {
    const device = this.device, S = GPUBufferUsage;
    const storage = (data, extra = 0) => {
      const buffer = device.createBuffer({ size: data.byteLength, usage: S.STORAGE | S.COPY_DST | extra });
      device.queue.writeBuffer(buffer, 0, data);
      return buffer;
    };
    const shape = device.createBuffer({ size: 8, usage: S.UNIFORM | S.COPY_DST });
    device.queue.writeBuffer(shape, 0, new Uint32Array([n]));
    device.queue.writeBuffer(shape, 4, new Float32Array([1 / Math.sqrt(head_dim)]));
    const inputs = [shape, storage(q), storage(k), storage(v)];
    const out = device.createBuffer({ size: n * head_dim * 4, usage: S.STORAGE | S.COPY_SRC });
    const scores = device.createBuffer({ size: n * n * 4, usage: S.STORAGE });
    const bind = (pipeline, buffers) => device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const tiled = this.pipeline("tiled", "attend_query_block", head_dim, causal);
    const naive = ["naive_scores", "naive_softmax", "naive_output"]
      .map((entry) => this.pipeline("naive", entry, head_dim, causal));
    const passes = {
      tiled: [[tiled, bind(tiled, [...inputs, out]), [ceil(n, BLOCK_M)]]],
      naive: [
        [naive[0], bind(naive[0], [...inputs, out, scores]), [ceil(n, 16), ceil(n, 16)]],
        [naive[1], bind(naive[1], [...inputs, out, scores]), [ceil(n, 64)]],
        [naive[2], bind(naive[2], [...inputs, out, scores]), [ceil(n * head_dim, 64)]],
      ],
    };
    const buffers = [...inputs, out, scores];
    return { passes, out, destroy: () => buffers.forEach((b) => b.destroy()) };
  }

  encode(passes, encoder) {
    for (const [pipeline, group, size] of passes) {
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(...size);
      pass.end();
    }
  }

  async call(prepared, kind, times = 1) {
    const encoder = this.device.createCommandEncoder();
    for (let t = 0; t < times; t++) this.encode(prepared.passes[kind], encoder);
    this.device.queue.submit([encoder.finish()]);
    await this.device.queue.onSubmittedWorkDone();
  }

  async read(prepared) {
    const size = prepared.out.size;
    const staging = this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(prepared.out, 0, staging, 0, size);
    this.device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const values = new Float32Array(staging.getMappedRange().slice(0));
    staging.destroy();
    return values;
  }

  async run(kind, q, k, v, n, head_dim, causal) {
    const prepared = this.prepare(q, k, v, n, head_dim, causal);
    await this.call(prepared, kind);
    const values = await this.read(prepared);
    prepared.destroy();
    return values;
  }
}

// ---------------------------------------------------------------------------------------------
// The same two algorithms in JavaScript, for a browser without WebGPU (float64 arithmetic).

export function naive_attention(q, k, v, n, d, causal) {
  const out = new Float64Array(n * d), scale = 1 / Math.sqrt(d), p = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let m = -Infinity, l = 0;
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let c = 0; c < d; c++) s += q[i * d + c] * k[j * d + c];
      p[j] = causal && j > i ? -Infinity : s * scale;
      m = Math.max(m, p[j]);
    }
    for (let j = 0; j < n; j++) { p[j] = Math.exp(p[j] - m); l += p[j]; }
    for (let j = 0; j < n; j++) for (let c = 0; c < d; c++) out[i * d + c] += p[j] / l * v[j * d + c];
  }
  return out;
}

export function tiled_attention_forward(q, k, v, n, d, causal) {
  const out = new Float64Array(n * d), scale = 1 / Math.sqrt(d);
  for (let start_m = 0; start_m < n; start_m += BLOCK_M) {
    const end_n = causal ? Math.min(n, start_m + BLOCK_M) : n;
    for (let i = start_m; i < Math.min(n, start_m + BLOCK_M); i++) {
      let m_i = -Infinity, l_i = 0;
      const acc = new Float64Array(d);
      for (let start_n = 0; start_n < end_n; start_n += BLOCK_N) {
        const s_ij = [];
        let m_new = m_i;
        for (let j = start_n; j < Math.min(end_n, start_n + BLOCK_N); j++) {
          let s = 0;
          for (let c = 0; c < d; c++) s += q[i * d + c] * k[j * d + c];
          s_ij.push(causal && j > i ? -Infinity : s * scale);
          m_new = Math.max(m_new, s_ij[s_ij.length - 1]);
        }
        const alpha = Math.exp(m_i - m_new);
        l_i *= alpha;
        for (let c = 0; c < d; c++) acc[c] *= alpha;
        s_ij.forEach((s, t) => {
          const p_ij = Math.exp(s - m_new);
          l_i += p_ij;
          for (let c = 0; c < d; c++) acc[c] += p_ij * v[(start_n + t) * d + c];
        });
        m_i = m_new;
      }
      for (let c = 0; c < d; c++) out[i * d + c] = acc[c] / l_i;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The widget

function table(caption, head, rows) {
  return element("table", {}, [
    element("caption", { text: caption }),
    element("thead", {}, [element("tr", {}, head.map((h) => element("th", { scope: "col", text: h })))]),
    element("tbody", {}, rows.map((row) => element("tr", {}, row.map((cell) => element("td", { text: cell }))))),
  ]);
}

const largest = (a, b) => a.reduce((worst, x, i) => Math.max(worst, Number.isNaN(x) ? Infinity : Math.abs(x - b[i])), 0);
const bytes = (count) => count >= 1e6 ? `${(count / 1e6).toFixed(1)} MB` : `${(count / 1e3).toFixed(1)} KB`;

// The lengths the timing tries at head dim 64, until one call takes longer than SLOW_MS.
export const LENGTHS = [256, 512, 1024, 2048, 4096];
export const TIMED_HEAD_DIM = 64;
const SLOW_MS = 400;

async function gpu() {
  if (!navigator.gpu) return { missing: "this browser has no WebGPU (navigator.gpu)" };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { missing: "this browser offers no WebGPU adapter" };
  const device = await adapter.requestDevice();
  const info = adapter.info || {};
  const name = [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ");
  return { adapter, device, name: name || "(the browser does not name it)" };
}

async function time(kernels, kind, prepared) {
  await kernels.call(prepared, kind); // warm-up: the pipeline is compiled on first use
  let start = performance.now();
  await kernels.call(prepared, kind);
  const once = performance.now() - start;
  const times = Math.max(1, Math.min(20, Math.floor(200 / Math.max(once, 0.01))));
  if (times === 1) return once;
  start = performance.now();
  await kernels.call(prepared, kind, times);
  return (performance.now() - start) / times;
}

async function measure(kernels, live, body, status) {
  const d = TIMED_HEAD_DIM, rows = [];
  live.result.timings = [];
  for (const n of LENGTHS) {
    status.textContent = `Timing n = ${n}…`;
    const random = () => Float32Array.from({ length: n * d }, () => Math.random() * 2 - 1);
    const prepared = kernels.prepare(random(), random(), random(), n, d, false);
    const tiled = await time(kernels, "tiled", prepared);
    const naive = await time(kernels, "naive", prepared);
    prepared.destroy();
    const timing = { n, tiled_ms: tiled, naive_ms: naive, naive_bytes: 2 * 4 * n * n + 4 * n * d, tiled_bytes: 4 * n * d };
    live.result.timings.push(timing);
    rows.push([String(n), tiled.toFixed(2), naive.toFixed(2), bytes(timing.naive_bytes), bytes(timing.tiled_bytes)]);
    body.replaceChildren(table(`Time per call at head dim ${d} on ${live.result.adapter}`,
      ["n", "tiled (ms)", "naive (ms)", "naive writes", "tiled writes"], rows));
    if (Math.max(tiled, naive) > SLOW_MS) {
      status.textContent = `Stopped after n = ${n}: a call took over ${SLOW_MS} ms on this adapter.`;
      return;
    }
  }
  status.textContent = "Done.";
}

export async function mount(container) {
  const app = container.querySelector(".book-live__app");
  window.bookLive = window.bookLive || {};
  const live = { container, result: null };
  window.bookLive.flash = live;
  container.dataset.state = "running";
  const response = await fetch(new URL("reference.json", new URL(container.dataset.model, location.href)));
  if (!response.ok) throw new Error(`reference.json: HTTP ${response.status}`);
  const reference = await response.json();
  const found = await gpu();
  const kernels = found.device ? new Kernels(found.device) : null;
  const result = { backend: kernels ? "webgpu" : "cpu", adapter: found.name || null, cases: [] };
  const rows = [];
  for (const c of reference.cases) {
    const [q, k, v] = [c.q, c.k, c.v].map((x) => Float32Array.from(x));
    const args = [q, k, v, c.length, c.head_dim, c.causal];
    const tiled = kernels ? await kernels.run("tiled", ...args) : tiled_attention_forward(...args);
    const naive = kernels ? await kernels.run("naive", ...args) : naive_attention(...args);
    result.cases.push({ length: c.length, head_dim: c.head_dim, causal: c.causal, tiled, naive });
    rows.push([String(c.length), String(c.head_dim), c.causal ? "yes" : "no",
      largest(tiled, c.out).toExponential(1), largest(naive, c.out).toExponential(1)]);
  }
  live.result = result;
  const where = kernels ? `the WebGPU kernels on ${found.name}` : "the same two algorithms in JavaScript, on the CPU";
  const parts = [table(`Largest difference from PyTorch's float32 output: ${where}`,
    ["n", "head dim", "causal", "tiled", "naive"], rows)];
  if (kernels) {
    const limits = found.adapter.limits;
    const tile = 2 * BLOCK_N * TIMED_HEAD_DIM * 4;
    parts.unshift(element("p", { text: `Adapter: ${found.name}. Workgroup memory: ` +
      `${limits.maxComputeWorkgroupStorageSize.toLocaleString("en")} bytes ` +
      `(maxComputeWorkgroupStorageSize); a tile of keys and one of values at head dim ` +
      `${TIMED_HEAD_DIM} take ${tile.toLocaleString("en")} bytes.` }));
    const status = element("p", { role: "status", "aria-live": "polite" });
    const timings = element("div");
    const button = element("button", { type: "button", class: "md-button book-live__time",
      text: `Time both kernels, n = ${LENGTHS[0]} to ${LENGTHS[LENGTHS.length - 1]}` });
    button.addEventListener("click", async () => {
      button.disabled = true;
      container.dataset.state = "running";
      try {
        await measure(kernels, live, timings, status);
        container.dataset.state = "done";
      } catch (error) {
        container.dataset.state = "error";
        status.textContent = `The measurement failed: ${error.message}`;
        throw error;
      } finally {
        button.disabled = false;
      }
    });
    parts.push(element("p", {}, [button]), status, timings);
  } else {
    parts.unshift(element("p", { text: `WebGPU is missing here: ${found.missing}. ` +
      "Below, the chapter's tiled algorithm and the naive one run in JavaScript on the CPU " +
      "instead, against the same PyTorch outputs; there is nothing of a GPU to time." }));
  }
  app.replaceChildren(...parts);
  container.dataset.state = "done";
}
