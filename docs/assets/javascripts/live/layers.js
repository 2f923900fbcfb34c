// The pieces both live models share, each named after the Python it mirrors.
//
// A matrix is an array of rows (Float64Array): X[i] is position i's vector, as the rows of a
// PyTorch tensor of shape (n, num_hiddens). A weight of the exported state_dict is read as
// float32 and turned into float64 (exactly), and every product is summed in float64
// (JavaScript's numbers), so the page computes at least as precisely as PyTorch's float32 does.
// The loops are written out (no map or forEach in them): they are where the time goes.
// Nothing here touches the page.

// The exported state_dict: model.json says where each tensor lies in weights.bin. A 2-D tensor
// becomes an array of its rows (views of the file's floats), a 1-D one a Float32Array.
export function load_state_dict(manifest, buffer) {
  const floats = new Float32Array(buffer);
  const params = {};
  for (const [name, { shape, offset }] of Object.entries(manifest.tensors)) {
    const size = shape.reduce((a, b) => a * b, 1);
    const data = Float64Array.from(floats.subarray(offset, offset + size));  // exact: f32 ⊂ f64
    if (shape.length === 2) {
      const [rows, columns] = shape;
      params[name] = Array.from({ length: rows }, (_, r) =>
        data.subarray(r * columns, (r + 1) * columns));
    } else {
      params[name] = data;
    }
  }
  return params;
}

export function dot(a, b) {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += a[i] * b[i];
  return sum;
}

// torch.nn.Linear: y = W x + b for every row x of X; W has shape (out_features, in_features).
export function linear(X, weight, bias = null) {
  return X.map((x) => {
    const y = new Float64Array(weight.length);
    for (let o = 0; o < weight.length; o++) y[o] = dot(weight[o], x) + (bias ? bias[o] : 0);
    return y;
  });
}

// The residual sum X + Y, row by row.
export function add(X, Y) {
  return X.map((x, i) => {
    const y = Y[i], sum = new Float64Array(x.length);
    for (let j = 0; j < x.length; j++) sum[j] = x[j] + y[j];
    return sum;
  });
}

// torch.nn.LayerNorm over the features of each row: biased variance, eps = 1e-5.
export function layer_norm(X, weight, bias, eps = 1e-5) {
  return X.map((x) => {
    const n = x.length;
    let mean = 0, variance = 0;
    for (let j = 0; j < n; j++) mean += x[j];
    mean /= n;
    for (let j = 0; j < n; j++) variance += (x[j] - mean) ** 2;
    const scale = 1 / Math.sqrt(variance / n + eps);
    const y = new Float64Array(n);
    for (let j = 0; j < n; j++) y[j] = (x[j] - mean) * scale * weight[j] + bias[j];
    return y;
  });
}

// The error function, for the exact GELU (torch.nn.GELU()): the rational approximations of
// fdlibm's s_erf.c (Sun Microsystems, 1993), accurate to within one unit in the last place.
export function erf(x) {
  const z = Math.abs(x);
  if (z < 0.84375) {  // erf(z) = z + z * P(z^2) / Q(z^2)
    const s = z * z;
    const P = 1.28379167095512558561e-01 + s * (-3.25042107247001499370e-01 + s * (
      -2.84817495755985104766e-02 + s * (-5.77027029648944159157e-03 + s * -2.37630166566501626084e-05)));
    const Q = 1 + s * (3.97917223959155352819e-01 + s * (6.50222499887672944485e-02 + s * (
      5.08130628187576562776e-03 + s * (1.32494738004321644526e-04 + s * -3.96022827877536812320e-06))));
    return x + x * (P / Q);
  }
  if (z < 1.25) {  // erf(z) = 0.845... + P(z - 1) / Q(z - 1)
    const s = z - 1;
    const P = -2.36211856075265944077e-03 + s * (4.14856118683748331666e-01 + s * (
      -3.72207876035701323847e-01 + s * (3.18346619901161753674e-01 + s * (
      -1.10894694282396677476e-01 + s * (3.54783043256182359371e-02 + s * -2.16637559486879084300e-03)))));
    const Q = 1 + s * (1.06420880400844228286e-01 + s * (5.40397917702171048937e-01 + s * (
      7.18286544141962662868e-02 + s * (1.26171219808761642112e-01 + s * (
      1.36370839120290507362e-02 + s * 1.19844998467991074170e-02)))));
    return Math.sign(x) * (8.45062911510467529297e-01 + P / Q);
  }
  if (z >= 6) return Math.sign(x);
  const s = 1 / (z * z);
  let R, S;
  if (z < 1 / 0.35) {  // erfc(z) = exp(-z^2 - 0.5625 + R / S) / z, for z in [1.25, 2.857)
    R = -9.86494403484714822705e-03 + s * (-6.93858572707181764372e-01 + s * (
      -1.05586262253232909814e+01 + s * (-6.23753324503260060396e+01 + s * (
      -1.62396669462573470355e+02 + s * (-1.84605092906711035994e+02 + s * (
      -8.12874355063065934246e+01 + s * -9.81432934416914548592e+00))))));
    S = 1 + s * (1.96512716674392571292e+01 + s * (1.37657754143519042600e+02 + s * (
      4.34565877475229228821e+02 + s * (6.45387271733267880336e+02 + s * (
      4.29008140027567833386e+02 + s * (1.08635005541779435134e+02 + s * (
      6.57024977031928170135e+00 + s * -6.04244152148580987438e-02)))))));
  } else {  // z in [2.857, 6)
    R = -9.86494292470009928597e-03 + s * (-7.99283237680523006574e-01 + s * (
      -1.77579549177547519889e+01 + s * (-1.60636384855821916062e+02 + s * (
      -6.37566443368389627722e+02 + s * (-1.02509513161107724954e+03 + s * -4.83519191608651397019e+02)))));
    S = 1 + s * (3.03380607434824582924e+01 + s * (3.25792512996573918826e+02 + s * (
      1.53672958608443695994e+03 + s * (3.19985821950859553908e+03 + s * (
      2.55305040643316442583e+03 + s * (4.74528541206955367215e+02 + s * -2.24409524465858183362e+01))))));
  }
  // fdlibm rounds z to its high 32 bits here so that exp(-z^2) is exact; in float64 the plain
  // product is accurate enough for this page (relative error about 1e-16).
  const erfc = Math.exp(-z * z - 0.5625 + R / S) / z;
  return Math.sign(x) * (1 - erfc);
}

export const ACTIVATIONS = {
  relu: (x) => (x > 0 ? x : 0),
  gelu: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
};

// transformer_sublayers.PositionWiseFFN (and the GPT's nn.Sequential FFN):
// dense2(activation(dense1(X))), the same two layers at every position.
export function position_wise_ffn(X, dense1, dense2, activation) {
  const hidden = linear(X, dense1.weight, dense1.bias);
  const act = ACTIVATIONS[activation];
  for (const h of hidden) for (let j = 0; j < h.length; j++) h[j] = act(h[j]);
  return linear(hidden, dense2.weight, dense2.bias);
}

// masking.causal_mask: query i may attend key j when j <= i + diagonal, where the diagonal is
// 0 ("top-left") or num_keys - num_queries ("bottom-right": the queries are the last
// positions, as when a decoder with a key/value cache gets one new token).
export function causal_mask(num_queries, num_keys, alignment = "top-left") {
  const diagonal = alignment === "bottom-right" ? num_keys - num_queries : 0;
  return Array.from({ length: num_queries }, (_, i) =>
    Array.from({ length: num_keys }, (_, j) => j <= i + diagonal));
}

// masking.masked_softmax of one row of scores: a hidden key (visible[j] false) gets exactly
// zero weight, and a row with no visible key gets zeros, never NaN.
export function masked_softmax(scores, visible = null) {
  const n = scores.length, weights = new Float64Array(n);
  let largest = -Infinity;
  for (let j = 0; j < n; j++) if (!visible || visible[j]) largest = Math.max(largest, scores[j]);
  if (largest === -Infinity) return weights;
  let total = 0;
  for (let j = 0; j < n; j++) {
    if (!visible || visible[j]) {
      weights[j] = Math.exp(scores[j] - largest);
      total += weights[j];
    }
  }
  for (let j = 0; j < n; j++) weights[j] /= total;
  return weights;
}

// The log of a softmax over one row (greedy_decode takes its argmax).
export function log_softmax(logits) {
  let largest = -Infinity, total = 0;
  for (const value of logits) largest = Math.max(largest, value);
  for (const value of logits) total += Math.exp(value - largest);
  return logits.map((value) => value - largest - Math.log(total));
}

export function argmax(row) {
  let best = 0;
  for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
  return best;
}

// multihead.split_heads: (n, num_heads * head_dim) -> one (n, head_dim) matrix per head.
export function split_heads(X, num_heads) {
  const head_dim = X.length ? X[0].length / num_heads : 0;
  return Array.from({ length: num_heads }, (_, h) =>
    X.map((x) => x.subarray(h * head_dim, (h + 1) * head_dim)));
}

// multihead.merge_heads: the heads' outputs side by side again, (n, num_heads * head_dim).
export function merge_heads(heads) {
  const head_dim = heads[0].length ? heads[0][0].length : 0;
  return heads[0].map((_, i) => {
    const merged = new Float64Array(heads.length * head_dim);
    heads.forEach((head, h) => merged.set(head[i], h * head_dim));
    return merged;
  });
}

// attention.DotProductAttention of one head: softmax(q k / sqrt(d)) for every query, masked
// where mask[i][j] is false (a mask of null shows every key), then the weighted mean of the
// values. Returns the output and the weights, as the module keeps them.
export function dot_product_attention(queries, keys, values, mask = null) {
  const d = queries.length ? queries[0].length : 0;
  const weights = queries.map((q, i) => {
    const scores = new Float64Array(keys.length);
    for (let j = 0; j < keys.length; j++) scores[j] = dot(q, keys[j]) / Math.sqrt(d);
    return masked_softmax(scores, mask ? mask[i] : null);
  });
  const output = weights.map((w) => {
    const out = new Float64Array(values.length ? values[0].length : 0);
    for (let j = 0; j < w.length; j++) {
      if (w[j] === 0) continue;
      const v = values[j];
      for (let c = 0; c < out.length; c++) out[c] += w[j] * v[c];
    }
    return out;
  });
  return { output, weights };
}
