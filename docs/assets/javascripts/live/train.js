// The attention playground's trainer: a tiny GPT (attention_book/gpt.py), its forward and
// backward pass and Adam, in plain JavaScript and float64, the twin of attention_book/
// playground.py. From a seed both sides draw the same batches and the same initial weights
// (Mulberry32, integer arithmetic), so the book's browser check can train both and compare
// them step for step. No DOM here: train_widget.js draws what this computes.
//
// Shapes follow the Python: a batch is B sequences of T = 2 * num_digits tokens; every
// activation is a Float64Array of rows (B * T rows of num_hiddens numbers), and a linear
// layer's weight is (out, in), row-major, as nn.Linear stores it.

import { erf } from "./layers.js";
import { sinusoidal_table } from "./transformer.js";

export const TASKS = ["reverse", "sort"];
export const POSITIONALS = ["learned", "sinusoidal", "none"];
export const SEPARATOR = 10; // digits are tokens 0-9
export const VOCAB_SIZE = 11;
export const SOLVED_ACCURACY = 0.99;
export const EVAL_SIZE = 256;
export const EVAL_SEED = 12345;
export const DEFAULTS = {
  task: "reverse", num_blks: 2, num_heads: 2, positional: "learned", num_digits: 5,
  num_hiddens: 32, ffn_num_hiddens: 64, batch_size: 16, lr: 0.003, seed: 0,
};
const LN_EPS = 1e-5;
const BETA1 = 0.9, BETA2 = 0.999, ADAM_EPS = 1e-8;

// ---------------------------------------------------------------------------------------------
// Randomness: Mulberry32, as attention_book.playground.Mulberry32.

export class Mulberry32 {
  constructor(seed) { this.state = seed >>> 0; }
  next_uint32() {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1) >>> 0;
    t = (t ^ ((t + (Math.imul(t ^ (t >>> 7), t | 61) >>> 0)) >>> 0)) >>> 0;
    return (t ^ (t >>> 14)) >>> 0;
  }
  uniform() { return this.next_uint32() / 4294967296; }
  normal() { // Box-Muller
    const u1 = 1 - this.uniform(), u2 = this.uniform();
    return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  }
}

// playground_batch: digits, the separator, the answer; the model reads all but the last token.
export function playground_batch(task, rng, batch_size, num_digits) {
  const T = 2 * num_digits;
  const tokens = new Int32Array(batch_size * T), answers = new Int32Array(batch_size * num_digits);
  for (let b = 0; b < batch_size; b++) {
    const digits = Array.from({ length: num_digits }, () => rng.next_uint32() % 10);
    const answer = task === "reverse" ? digits.slice().reverse() : digits.slice().sort((x, y) => x - y);
    const row = [...digits, SEPARATOR, ...answer];
    for (let t = 0; t < T; t++) tokens[b * T + t] = row[t];
    for (let t = 0; t < num_digits; t++) answers[b * num_digits + t] = answer[t];
  }
  return { tokens, answers, batch_size };
}

// ---------------------------------------------------------------------------------------------
// The parameters, named and ordered as GPT.named_parameters() names them.

export function parameter_shapes(config) {
  const { num_hiddens: d, ffn_num_hiddens: f, num_blks, num_digits } = config;
  const shapes = [["embedding.weight", [VOCAB_SIZE, d]]];
  if (config.positional === "learned") shapes.push(["position.P", [1, 2 * num_digits, d]]);
  for (let i = 0; i < num_blks; i++) {
    const p = `blks.${i}.`;
    shapes.push([`${p}ln1.weight`, [d]], [`${p}ln1.bias`, [d]]);
    for (const w of ["W_q", "W_k", "W_v", "W_o"]) shapes.push([`${p}attention.heads.${w}.weight`, [d, d]]);
    shapes.push([`${p}ln2.weight`, [d]], [`${p}ln2.bias`, [d]]);
    shapes.push([`${p}ffn.0.weight`, [f, d]], [`${p}ffn.0.bias`, [f]]);
    shapes.push([`${p}ffn.2.weight`, [d, f]], [`${p}ffn.2.bias`, [d]]);
  }
  shapes.push(["ln_f.weight", [d]], ["ln_f.bias", [d]], ["head.weight", [VOCAB_SIZE, d]]);
  return shapes;
}

// init_parameters: PyTorch's default distributions, drawn from the seed in this order.
export function init_parameters(config, rng) {
  const params = new Map();
  for (const [name, shape] of parameter_shapes(config)) {
    const data = new Float64Array(shape.reduce((a, b) => a * b, 1));
    const kind = name.split(".").pop(), owner = name.slice(0, name.lastIndexOf("."));
    if (/(^|\.)ln(1|2|_f)$/.test(owner)) data.fill(kind === "weight" ? 1 : 0);
    else if (name === "embedding.weight") for (let i = 0; i < data.length; i++) data[i] = rng.normal();
    else if (name === "position.P") for (let i = 0; i < data.length; i++) data[i] = 0.02 * rng.normal();
    else { // a linear layer: uniform in ±1/sqrt(fan_in), for its weight and its bias
      const fan_in = kind === "weight" ? shape[1] : params.get(`${owner}.weight`).shape[1];
      const bound = 1 / Math.sqrt(fan_in);
      for (let i = 0; i < data.length; i++) data[i] = (2 * rng.uniform() - 1) * bound;
    }
    params.set(name, { data, shape });
  }
  return params;
}

// ---------------------------------------------------------------------------------------------
// Layers: each forward returns what its backward needs; each backward adds into the gradients.

// nn.Linear: Y = X W^T + b, X (N, in), W (out, in). The loops over `in` go four numbers at a
// time (n_in is a multiple of 4), which lets the JavaScript engine overlap the additions.
export function linear_forward(X, N, W, b, n_in, n_out) {
  const Y = new Float64Array(N * n_out);
  for (let i = 0; i < N; i++) {
    const x = i * n_in;
    for (let o = 0; o < n_out; o++) {
      const w = o * n_in;
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (let c = 0; c < n_in; c += 4) {
        s0 += X[x + c] * W[w + c];
        s1 += X[x + c + 1] * W[w + c + 1];
        s2 += X[x + c + 2] * W[w + c + 2];
        s3 += X[x + c + 3] * W[w + c + 3];
      }
      Y[i * n_out + o] = (b ? b[o] : 0) + ((s0 + s1) + (s2 + s3));
    }
  }
  return Y;
}

// Its backward: dX = dY W, dW += dY^T X, db += column sums of dY.
export function linear_backward(dY, X, N, W, n_in, n_out, dW, db) {
  const dX = new Float64Array(N * n_in);
  for (let i = 0; i < N; i++) {
    const x = i * n_in;
    for (let o = 0; o < n_out; o++) {
      const g = dY[i * n_out + o];
      if (g === 0) continue; // the rows of positions without a loss
      const w = o * n_in;
      for (let c = 0; c < n_in; c += 4) {
        dX[x + c] += g * W[w + c];
        dX[x + c + 1] += g * W[w + c + 1];
        dX[x + c + 2] += g * W[w + c + 2];
        dX[x + c + 3] += g * W[w + c + 3];
        dW[w + c] += g * X[x + c];
        dW[w + c + 1] += g * X[x + c + 1];
        dW[w + c + 2] += g * X[x + c + 2];
        dW[w + c + 3] += g * X[x + c + 3];
      }
      if (db) db[o] += g;
    }
  }
  return dX;
}

// nn.LayerNorm over the last axis (biased variance, eps 1e-5).
export function layer_norm_forward(X, N, d, weight, bias) {
  const Y = new Float64Array(N * d), xhat = new Float64Array(N * d), rstd = new Float64Array(N);
  for (let i = 0; i < N; i++) {
    let mean = 0;
    for (let c = 0; c < d; c++) mean += X[i * d + c];
    mean /= d;
    let variance = 0;
    for (let c = 0; c < d; c++) variance += (X[i * d + c] - mean) ** 2;
    variance /= d;
    rstd[i] = 1 / Math.sqrt(variance + LN_EPS);
    for (let c = 0; c < d; c++) {
      xhat[i * d + c] = (X[i * d + c] - mean) * rstd[i];
      Y[i * d + c] = xhat[i * d + c] * weight[c] + bias[c];
    }
  }
  return { Y, xhat, rstd };
}

export function layer_norm_backward(dY, cache, N, d, weight, dweight, dbias) {
  const { xhat, rstd } = cache;
  const dX = new Float64Array(N * d);
  for (let i = 0; i < N; i++) {
    let mean_g = 0, mean_gx = 0;
    for (let c = 0; c < d; c++) {
      const g = dY[i * d + c] * weight[c];
      mean_g += g;
      mean_gx += g * xhat[i * d + c];
      dweight[c] += dY[i * d + c] * xhat[i * d + c];
      dbias[c] += dY[i * d + c];
    }
    mean_g /= d;
    mean_gx /= d;
    for (let c = 0; c < d; c++) {
      const g = dY[i * d + c] * weight[c];
      dX[i * d + c] = rstd[i] * (g - mean_g - xhat[i * d + c] * mean_gx);
    }
  }
  return dX;
}

// nn.GELU(): x * Phi(x), with the exact (erf) normal distribution function (layers.js's erf).
// The forward pass keeps Phi(x) for the backward pass: d/dx x Phi(x) = Phi(x) + x phi(x).
const normal_cdf = (x) => 0.5 * (1 + erf(x / Math.SQRT2));
const gelu_grad = (x, cdf) => cdf + x * Math.exp(-0.5 * x * x) / Math.sqrt(2 * Math.PI);

// Causal softmax attention of every head (GroupedQueryAttention.attend with is_causal=True):
// Q, K, V are (B*T, d); head h uses features h*hd to (h+1)*hd. Returns the merged heads'
// output (B*T, d) and the weights P[b][h] (T, T), which the backward pass and the maps read.
export function causal_attention_forward(Q, K, V, B, T, d, num_heads, masked = true) {
  const hd = d / num_heads, scale = 1 / Math.sqrt(hd);
  const O = new Float64Array(B * T * d), P = new Float64Array(B * num_heads * T * T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < num_heads; h++) {
      const p0 = (b * num_heads + h) * T * T;
      for (let i = 0; i < T; i++) {
        const q = (b * T + i) * d + h * hd, last = masked ? i : T - 1; // keys 0..i: the causal mask
        let max = -Infinity;
        for (let j = 0; j <= last; j++) {
          const k = (b * T + j) * d + h * hd;
          let s = 0;
          for (let c = 0; c < hd; c++) s += Q[q + c] * K[k + c];
          P[p0 + i * T + j] = s * scale;
          if (s * scale > max) max = s * scale;
        }
        let sum = 0;
        for (let j = 0; j <= last; j++) sum += (P[p0 + i * T + j] = Math.exp(P[p0 + i * T + j] - max));
        for (let j = 0; j <= last; j++) P[p0 + i * T + j] /= sum; // the masked keys stay 0
        for (let j = 0; j <= last; j++) {
          const w = P[p0 + i * T + j], v = (b * T + j) * d + h * hd;
          for (let c = 0; c < hd; c++) O[q + c] += w * V[v + c];
        }
      }
    }
  }
  return { O, P };
}

// Its backward: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K scale,
// dK = dS^T Q scale. A masked key has P = 0, so it gets no gradient.
export function causal_attention_backward(dO, Q, K, V, P, B, T, d, num_heads) {
  const hd = d / num_heads, scale = 1 / Math.sqrt(hd);
  const dQ = new Float64Array(B * T * d), dK = new Float64Array(B * T * d), dV = new Float64Array(B * T * d);
  const dP = new Float64Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < num_heads; h++) {
      const p0 = (b * num_heads + h) * T * T;
      for (let i = 0; i < T; i++) {
        const q = (b * T + i) * d + h * hd;
        let dot = 0;
        for (let j = 0; j < T; j++) {
          const w = P[p0 + i * T + j], v = (b * T + j) * d + h * hd;
          let s = 0;
          for (let c = 0; c < hd; c++) {
            s += dO[q + c] * V[v + c];
            dV[v + c] += w * dO[q + c];
          }
          dP[j] = s;
          dot += s * w;
        }
        for (let j = 0; j < T; j++) {
          const w = P[p0 + i * T + j];
          if (w === 0) continue;
          const ds = w * (dP[j] - dot) * scale, k = (b * T + j) * d + h * hd;
          for (let c = 0; c < hd; c++) {
            dQ[q + c] += ds * K[k + c];
            dK[k + c] += ds * Q[q + c];
          }
        }
      }
    }
  }
  return { dQ, dK, dV };
}

// ---------------------------------------------------------------------------------------------
// The model: GPT.forward, and its backward pass by hand.

export class Playground {
  constructor(options = {}) {
    this.config = { ...DEFAULTS, ...options };
    const c = this.config;
    if (!TASKS.includes(c.task)) throw new Error(`task must be one of ${TASKS}, got ${c.task}`);
    if (!POSITIONALS.includes(c.positional)) throw new Error(`positional must be one of ${POSITIONALS}, got ${c.positional}`);
    if (c.num_hiddens % c.num_heads) throw new Error(`num_heads must divide num_hiddens, got ${c.num_heads} and ${c.num_hiddens}`);
    if (c.num_hiddens % 4 || c.ffn_num_hiddens % 4) throw new Error(`num_hiddens and ffn_num_hiddens must be multiples of 4, got ${c.num_hiddens} and ${c.ffn_num_hiddens}`);
    this.masked = true; // the causal mask (the check's tests switch it off to see the check fail)
    this.table = c.positional === "sinusoidal" // one row after the other
      ? Float64Array.from(sinusoidal_table(2 * c.num_digits, c.num_hiddens).flatMap((row) => [...row]))
      : null;
    this.load(init_parameters(c, new Mulberry32(c.seed)));
    this.stream = new Mulberry32(c.seed + 1);
    const evaluation = playground_batch(c.task, new Mulberry32(EVAL_SEED), EVAL_SIZE, c.num_digits);
    this.evaluation = evaluation;
  }

  // Set every parameter (a Map of name -> {data, shape}, or of plain arrays), and restart Adam.
  load(params) {
    this.params = new Map();
    for (const [name, shape] of parameter_shapes(this.config)) {
      const given = params.get(name);
      if (!given) throw new Error(`missing parameter ${name}`);
      const data = Float64Array.from(given.data || given);
      if (data.length !== shape.reduce((a, b) => a * b, 1)) throw new Error(`${name}: ${data.length} numbers for shape ${shape}`);
      this.params.set(name, { data, shape });
    }
    this.moments = new Map([...this.params].map(([n, p]) => [n, [new Float64Array(p.data.length), new Float64Array(p.data.length)]]));
    this.steps = 0;
    this.losses = [];
  }

  p(name) { return this.params.get(name).data; }

  // The forward pass of a batch; keeps what backward needs in this.cache. Returns the logits
  // (B*T, VOCAB_SIZE) and the attention weights of every block.
  forward(tokens, B) {
    const { num_hiddens: d, ffn_num_hiddens: f, num_heads, num_blks, num_digits } = this.config;
    const T = 2 * num_digits, N = B * T;
    const E = this.p("embedding.weight");
    let X = new Float64Array(N * d);
    const P = this.config.positional === "learned" ? this.p("position.P") : this.table;
    for (let i = 0; i < N; i++) {
      const t = i % T, e = tokens[i] * d;
      for (let c = 0; c < d; c++) X[i * d + c] = E[e + c] + (P ? P[t * d + c] : 0);
    }
    const blocks = [];
    for (let l = 0; l < num_blks; l++) {
      const w = (name) => this.p(`blks.${l}.${name}`);
      const input = X;
      const ln1 = layer_norm_forward(X, N, d, w("ln1.weight"), w("ln1.bias"));
      const Q = linear_forward(ln1.Y, N, w("attention.heads.W_q.weight"), null, d, d);
      const K = linear_forward(ln1.Y, N, w("attention.heads.W_k.weight"), null, d, d);
      const V = linear_forward(ln1.Y, N, w("attention.heads.W_v.weight"), null, d, d);
      const attention = causal_attention_forward(Q, K, V, B, T, d, num_heads, this.masked);
      const A = linear_forward(attention.O, N, w("attention.heads.W_o.weight"), null, d, d);
      const middle = new Float64Array(N * d);
      for (let i = 0; i < N * d; i++) middle[i] = input[i] + A[i]; // X + attention(LN(X))
      const ln2 = layer_norm_forward(middle, N, d, w("ln2.weight"), w("ln2.bias"));
      const H = linear_forward(ln2.Y, N, w("ffn.0.weight"), w("ffn.0.bias"), d, f);
      const Phi = H.map(normal_cdf), G = new Float64Array(H.length);
      for (let i = 0; i < H.length; i++) G[i] = H[i] * Phi[i];
      const F = linear_forward(G, N, w("ffn.2.weight"), w("ffn.2.bias"), f, d);
      X = new Float64Array(N * d);
      for (let i = 0; i < N * d; i++) X[i] = middle[i] + F[i]; // X + FFN(LN(X))
      blocks.push({ ln1, Q, K, V, attention, middle, ln2, H, Phi, G });
    }
    const ln_f = layer_norm_forward(X, N, d, this.p("ln_f.weight"), this.p("ln_f.bias"));
    const logits = linear_forward(ln_f.Y, N, this.p("head.weight"), null, d, VOCAB_SIZE);
    this.cache = { tokens, B, blocks, ln_f };
    return logits;
  }

  // playground_loss: cross-entropy of the answer digits, at the separator and after it.
  loss(logits, answers, B) {
    const L = this.config.num_digits, T = 2 * L, count = B * L;
    const dlogits = new Float64Array(logits.length);
    let total = 0;
    for (let b = 0; b < B; b++) {
      for (let t = 0; t < L; t++) {
        const row = (b * T + L + t) * VOCAB_SIZE, target = answers[b * L + t];
        let max = -Infinity;
        for (let v = 0; v < VOCAB_SIZE; v++) max = Math.max(max, logits[row + v]);
        let sum = 0;
        for (let v = 0; v < VOCAB_SIZE; v++) sum += Math.exp(logits[row + v] - max);
        total += Math.log(sum) + max - logits[row + target];
        for (let v = 0; v < VOCAB_SIZE; v++) dlogits[row + v] = Math.exp(logits[row + v] - max) / sum / count;
        dlogits[row + target] -= 1 / count;
      }
    }
    return { loss: total / count, dlogits };
  }

  // The backward pass of the last forward: every parameter's gradient, in a Map.
  backward(dlogits) {
    const { num_hiddens: d, ffn_num_hiddens: f, num_heads, num_blks, num_digits } = this.config;
    const { tokens, B, blocks, ln_f } = this.cache;
    const T = 2 * num_digits, N = B * T;
    const grads = new Map([...this.params].map(([n, p]) => [n, new Float64Array(p.data.length)]));
    const g = (name) => grads.get(name);
    let dX = linear_backward(dlogits, ln_f.Y, N, this.p("head.weight"), d, VOCAB_SIZE, g("head.weight"), null);
    dX = layer_norm_backward(dX, ln_f, N, d, this.p("ln_f.weight"), g("ln_f.weight"), g("ln_f.bias"));
    for (let l = num_blks - 1; l >= 0; l--) {
      const name = (n) => `blks.${l}.${n}`, w = (n) => this.p(name(n)), gw = (n) => g(name(n));
      const { ln1, Q, K, V, attention, middle, ln2, H, Phi, G } = blocks[l];
      // X = middle + FFN(LN2(middle)): the residual passes dX on, the FFN adds its own.
      let dG = linear_backward(dX, G, N, w("ffn.2.weight"), f, d, gw("ffn.2.weight"), gw("ffn.2.bias"));
      for (let i = 0; i < dG.length; i++) dG[i] *= gelu_grad(H[i], Phi[i]);
      let dln = linear_backward(dG, ln2.Y, N, w("ffn.0.weight"), d, f, gw("ffn.0.weight"), gw("ffn.0.bias"));
      dln = layer_norm_backward(dln, ln2, N, d, w("ln2.weight"), gw("ln2.weight"), gw("ln2.bias"));
      const dmiddle = new Float64Array(N * d);
      for (let i = 0; i < N * d; i++) dmiddle[i] = dX[i] + dln[i];
      // middle = X + W_o(attention(LN1(X))).
      const dO = linear_backward(dmiddle, attention.O, N, w("attention.heads.W_o.weight"), d, d, gw("attention.heads.W_o.weight"), null);
      const { dQ, dK, dV } = causal_attention_backward(dO, Q, K, V, attention.P, B, T, d, num_heads);
      const dY = new Float64Array(N * d);
      for (const [dZ, W] of [[dQ, "W_q"], [dK, "W_k"], [dV, "W_v"]]) {
        const part = linear_backward(dZ, ln1.Y, N, w(`attention.heads.${W}.weight`), d, d, gw(`attention.heads.${W}.weight`), null);
        for (let i = 0; i < N * d; i++) dY[i] += part[i];
      }
      const dx = layer_norm_backward(dY, ln1, N, d, w("ln1.weight"), gw("ln1.weight"), gw("ln1.bias"));
      dX = new Float64Array(N * d);
      for (let i = 0; i < N * d; i++) dX[i] = dmiddle[i] + dx[i];
    }
    const dE = g("embedding.weight"), dP = this.config.positional === "learned" ? g("position.P") : null;
    for (let i = 0; i < N; i++) {
      const t = i % T, e = tokens[i] * d;
      for (let c = 0; c < d; c++) {
        dE[e + c] += dX[i * d + c];
        if (dP) dP[t * d + c] += dX[i * d + c];
      }
    }
    return grads;
  }

  // torch.optim.Adam (foreach=False), one tensor at a time, in PyTorch's order of operations.
  adam(grads) {
    this.steps += 1;
    const lr = this.config.lr, step = this.steps;
    const bias_correction1 = 1 - BETA1 ** step, bias_correction2 = 1 - BETA2 ** step;
    const step_size = lr / bias_correction1, bias_correction2_sqrt = Math.sqrt(bias_correction2);
    for (const [name, { data }] of this.params) {
      const grad = grads.get(name), [m, v] = this.moments.get(name);
      for (let i = 0; i < data.length; i++) {
        m[i] += (1 - BETA1) * (grad[i] - m[i]); // exp_avg.lerp_(grad, 1 - beta1)
        v[i] = v[i] * BETA2 + (1 - BETA2) * grad[i] * grad[i];
        data[i] += -step_size * (m[i] / (Math.sqrt(v[i]) / bias_correction2_sqrt + ADAM_EPS));
      }
    }
  }

  // One training step on a given batch; returns its loss.
  train_on(batch) {
    const logits = this.forward(batch.tokens, batch.batch_size);
    const { loss, dlogits } = this.loss(logits, batch.answers, batch.batch_size);
    this.adam(this.backward(dlogits));
    this.losses.push(loss);
    return loss;
  }

  next_batch() {
    const c = this.config;
    return playground_batch(c.task, this.stream, c.batch_size, c.num_digits);
  }

  step() { return this.train_on(this.next_batch()); }

  // playground_accuracy: the share of answer digits predicted right, on the evaluation batch.
  accuracy(batch = this.evaluation) {
    const L = this.config.num_digits, T = 2 * L;
    const logits = this.forward(batch.tokens, batch.batch_size);
    let right = 0;
    for (let b = 0; b < batch.batch_size; b++) {
      for (let t = 0; t < L; t++) {
        const row = (b * T + L + t) * VOCAB_SIZE;
        let best = 0;
        for (let v = 1; v < VOCAB_SIZE; v++) if (logits[row + v] > logits[row + best]) best = v;
        if (best === batch.answers[b * L + t]) right += 1;
      }
    }
    return right / (batch.batch_size * L);
  }

  // The attention weights of one sequence: weights[block][head] is a (T, T) Float64Array, and
  // the model's own answer (its most probable digit at each answer position).
  look_at(tokens) {
    const { num_heads, num_blks, num_digits } = this.config;
    const T = 2 * num_digits;
    const logits = this.forward(tokens, 1);
    const weights = [];
    for (let l = 0; l < num_blks; l++) {
      const P = this.cache.blocks[l].attention.P;
      weights.push(Array.from({ length: num_heads }, (_, h) => P.slice(h * T * T, (h + 1) * T * T)));
    }
    const answer = [];
    for (let t = num_digits; t < T; t++) {
      let best = 0;
      for (let v = 1; v < VOCAB_SIZE; v++) if (logits[t * VOCAB_SIZE + v] > logits[t * VOCAB_SIZE + best]) best = v;
      answer.push(best);
    }
    return { weights, answer };
  }
}

// ---------------------------------------------------------------------------------------------
// The browser check's side (booktools/live/check.py): one case of reference.json, written by
// booktools/live/train.py from PyTorch. Float64 arrays come as base64 of little-endian bytes,
// token arrays as base64 of bytes.

function decode(text, Kind) {
  const bytes = Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));
  return new Kind(bytes.buffer);
}

// Train the case's configuration on its exported batches from its exported weights, and say
// how this page's own weights and batches compare with PyTorch's: returns the losses, the
// final parameters (name -> plain array), the largest difference between this page's
// initial weights and the exported ones, whether this page draws the same batches, and the
// time per step.
export function check_case(c) {
  const model = new Playground(c.config);
  const init = decode(c.init, Float64Array), final_offsets = [];
  const exported = new Map();
  let at = 0, init_difference = 0;
  for (const [name, shape] of parameter_shapes(model.config)) {
    const size = shape.reduce((a, b) => a * b, 1);
    const data = init.subarray(at, at + size);
    const own = model.params.get(name).data;
    for (let i = 0; i < size; i++) init_difference = Math.max(init_difference, Math.abs(own[i] - data[i]));
    exported.set(name, { data, shape });
    final_offsets.push([name, at, size]);
    at += size;
  }
  if (at !== init.length) throw new Error(`reference: ${init.length} initial numbers, the model has ${at}`);
  const tokens = decode(c.tokens, Uint8Array), answers = decode(c.answers, Uint8Array);
  const B = c.config.batch_size, T = 2 * c.config.num_digits, L = c.config.num_digits;
  let batches_equal = true;
  const batches = [];
  for (let s = 0; s < c.steps; s++) {
    const batch = {
      tokens: Int32Array.from(tokens.subarray(s * B * T, (s + 1) * B * T)),
      answers: Int32Array.from(answers.subarray(s * B * L, (s + 1) * B * L)),
      batch_size: B,
    };
    const own = model.next_batch();
    if (own.tokens.some((x, i) => x !== batch.tokens[i]) || own.answers.some((x, i) => x !== batch.answers[i])) batches_equal = false;
    batches.push(batch);
  }
  model.load(exported);
  const start = performance.now();
  for (const batch of batches) model.train_on(batch);
  const ms_per_step = (performance.now() - start) / c.steps;
  const final = Object.fromEntries([...model.params].map(([name, p]) => [name, Array.from(p.data)]));
  return { losses: model.losses.slice(), final, init_difference, batches_equal, ms_per_step };
}
