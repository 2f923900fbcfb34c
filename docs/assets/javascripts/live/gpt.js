// The optimizations chapter's character GPT, run in the page: the forward pass of
// attention_book/gpt.py (rotary positions, pre-norm blocks), the key/value cache of
// attention_book/kv_cache.py and apply_rotary of attention_book/rotary.py, with the same names.
//
// `params` is the exported state_dict (layers.load_state_dict): params["blks.0.attention.heads.
// W_q.weight"] is the Python model's tensor of that name.

import {
  add, argmax, causal_mask, dot_product_attention, layer_norm, linear, merge_heads,
  position_wise_ffn, split_heads,
} from "./layers.js";

// rotary.rotary_angles and rotary.apply_rotary: the feature pair (x[2i], x[2i+1]) of the row at
// position p turns by the angle p * base^(-2i / head_dim).
export function apply_rotary(x, positions, base = 10000) {
  return x.map((row, r) => {
    const rotated = new Float64Array(row.length);
    for (let i = 0; i < row.length; i += 2) {
      const angle = positions[r] * Math.pow(base, -i / row.length);
      const cos = Math.cos(angle), sin = Math.sin(angle);
      const even = row[i], odd = row[i + 1];
      rotated[i] = even * cos - odd * sin;
      rotated[i + 1] = even * sin + odd * cos;
    }
    return rotated;
  });
}

// kv_cache.KVCache: every layer's keys and values of the positions seen so far, per head.
export function new_cache(num_blks) {
  return { keys: Array.from({ length: num_blks }, () => null),
           values: Array.from({ length: num_blks }, () => null), length: 0 };
}

// KVCache.update: append one layer's new keys and values; return all of them so far.
function update(cache, layer, keys, values) {
  if (cache.keys[layer] !== null) {
    keys = keys.map((k, h) => cache.keys[layer][h].concat(k));
    values = values.map((v, h) => cache.values[layer][h].concat(v));
  }
  cache.keys[layer] = keys;
  cache.values[layer] = values;
  return [keys, values];
}

// gpt.CausalSelfAttention.forward: project the new positions, rotate queries and keys by their
// positions, join the cached keys and values, attend causally, merge the heads, project.
export function causal_self_attention(params, layer, X, cache, config) {
  const prefix = `blks.${layer}.attention.heads`, { num_heads } = config;
  const start = cache === null ? 0 : cache.length;
  const positions = X.map((_, t) => start + t);
  let queries = split_heads(linear(X, params[`${prefix}.W_q.weight`]), num_heads);
  let keys = split_heads(linear(X, params[`${prefix}.W_k.weight`]), num_heads);
  let values = split_heads(linear(X, params[`${prefix}.W_v.weight`]), num_heads);
  queries = queries.map((q) => apply_rotary(q, positions));
  keys = keys.map((k) => apply_rotary(k, positions));
  if (cache !== null) [keys, values] = update(cache, layer, keys, values);
  const num_queries = X.length, num_keys = keys[0].length;
  // Square: the causal mask; with a cache the queries are the last positions (bottom-right).
  const mask = num_queries === num_keys
    ? causal_mask(num_queries, num_keys)
    : causal_mask(num_queries, num_keys, "bottom-right");
  const heads = queries.map((q, h) => dot_product_attention(q, keys[h], values[h], mask));
  const output = linear(merge_heads(heads.map((head) => head.output)), params[`${prefix}.W_o.weight`]);
  return { output, weights: heads.map((head) => head.weights) };
}

// gpt.GPTBlock.forward: X + attention(LN(X)), then X + FFN(LN(X)) with a GELU.
export function gpt_block(params, layer, X, cache, config) {
  const prefix = `blks.${layer}`;
  const attention = causal_self_attention(
    params, layer, layer_norm(X, params[`${prefix}.ln1.weight`], params[`${prefix}.ln1.bias`]),
    cache, config);
  X = add(X, attention.output);
  const H = layer_norm(X, params[`${prefix}.ln2.weight`], params[`${prefix}.ln2.bias`]);
  const ffn = position_wise_ffn(
    H, { weight: params[`${prefix}.ffn.0.weight`], bias: params[`${prefix}.ffn.0.bias`] },
    { weight: params[`${prefix}.ffn.2.weight`], bias: params[`${prefix}.ffn.2.bias`] }, "gelu");
  return { X: add(X, ffn), weights: attention.weights };
}

// gpt.GPT.forward: next-token logits at every new position, and each block's weights
// ([block][head][new position][key]). With a cache, `tokens` follow the cached positions.
export function gpt_forward(model, tokens, cache = null) {
  const { params, config } = model;
  let X = tokens.map((token) => Float64Array.from(params["embedding.weight"][token]));
  const weights = [];
  for (let layer = 0; layer < config.num_blks; layer++) {
    const block = gpt_block(params, layer, X, cache, config);
    X = block.X;
    weights.push(block.weights);
  }
  if (cache !== null) cache.length += tokens.length;  // KVCache.advance
  X = layer_norm(X, params["ln_f.weight"], params["ln_f.bias"]);
  return { logits: linear(X, params["head.weight"]), weights };
}

// gpt.GPT.generate, one step at a time: yields each new token with its logits, the weights of
// the step's new positions and the time the step took (performance.now(), milliseconds).
// With the cache a step runs the new token only (the whole prompt at the first step); without
// it, every step runs the whole sequence again.
export function* generate(model, tokens, max_new_tokens, use_cache = true) {
  const cache = use_cache ? new_cache(model.config.num_blks) : null;
  let step_input = tokens;
  for (let step = 0; step < max_new_tokens; step++) {
    const start = performance.now();
    const out = gpt_forward(model, use_cache ? step_input : tokens, cache);
    const logits = out.logits[out.logits.length - 1];
    const next_token = argmax(logits);
    const ms = performance.now() - start;
    tokens = [...tokens, next_token];
    step_input = [next_token];
    yield { token: next_token, logits, weights: use_cache ? out.weights : null, ms };
  }
}

// A GPT from its exported files (model.json and the weights' state_dict).
export function gpt(manifest, params) {
  const { config } = manifest;
  if (config.positional !== "rope" || config.num_kv_heads !== config.num_heads) {
    throw new Error(`this page runs GPTs with rotary positions and multi-head attention, got ${JSON.stringify(config)}`);
  }
  return { config, params };
}
