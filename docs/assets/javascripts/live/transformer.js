// The Transformer chapter's translator, run in the page: the forward pass of
// attention_book/transformer.py, transformer_decoder.py and transformer_sublayers.py, and
// greedy_decode of attention_book/decoding.py, with the same names.
//
// `params` is the exported state_dict (layers.load_state_dict): params["encoder.blks.0.
// self_attention.W_q.weight"] is the Python model's tensor of that name.

import {
  add, argmax, causal_mask, dot_product_attention, layer_norm, linear, log_softmax,
  merge_heads, position_wise_ffn, split_heads,
} from "./layers.js";

// positional.sinusoidal_table: column 2i of row pos holds sin(pos / 10000^(2i / num_hiddens)),
// column 2i + 1 its cosine.
export function sinusoidal_table(max_len, num_hiddens) {
  return Array.from({ length: max_len }, (_, pos) => {
    const row = new Float64Array(num_hiddens);
    for (let i = 0; i < num_hiddens; i += 2) {
      const angle = pos / Math.pow(10000, i / num_hiddens);
      row[i] = Math.sin(angle);
      if (i + 1 < num_hiddens) row[i + 1] = Math.cos(angle);
    }
    return row;
  });
}

// TransformerEncoder / TransformerDecoder: embedding * sqrt(num_hiddens), plus the positional
// encoding of positions offset, offset + 1, ... (PositionalEncoding.forward).
export function embed(table, tokens, P, offset) {
  const scale = Math.sqrt(table[0].length);
  return tokens.map((token, t) => table[token].map((value, j) => value * scale + P[offset + t][j]));
}

// AddNorm.sublayer_input: LayerNorm(X) in pre-norm, X itself in post-norm (the paper).
function sublayer_input(params, prefix, X, norm_first) {
  return norm_first ? layer_norm(X, params[`${prefix}.ln.weight`], params[`${prefix}.ln.bias`]) : X;
}

// AddNorm.forward: X + Y in pre-norm, LayerNorm(X + Y) in post-norm.
function add_norm(params, prefix, X, Y, norm_first) {
  const sum = add(X, Y);
  return norm_first ? sum : layer_norm(sum, params[`${prefix}.ln.weight`], params[`${prefix}.ln.bias`]);
}

// transformer_decoder.project_heads: one of an attention's input layers, split into heads.
export function project_heads(weight, X, num_heads) {
  return split_heads(linear(X, weight), num_heads);
}

// transformer_decoder.attend_projected: a MultiHeadAttention on keys and values already
// projected; returns its output and every head's weights.
export function attend_projected(params, prefix, num_heads, queries, keys, values, mask = null) {
  const Q = project_heads(params[`${prefix}.W_q.weight`], queries, num_heads);
  const heads = Q.map((q, h) => dot_product_attention(q, keys[h], values[h], mask));
  const output = linear(merge_heads(heads.map((head) => head.output)), params[`${prefix}.W_o.weight`]);
  return { output, weights: heads.map((head) => head.weights) };
}

// multihead.MultiHeadAttention.forward: project queries, keys and values, attend, merge.
export function multi_head_attention(params, prefix, num_heads, queries, keys, values, mask = null) {
  const K = project_heads(params[`${prefix}.W_k.weight`], keys, num_heads);
  const V = project_heads(params[`${prefix}.W_v.weight`], values, num_heads);
  return attend_projected(params, prefix, num_heads, queries, K, V, mask);
}

// transformer.TransformerEncoderBlock.forward. One sentence has no padding: every key is valid.
export function transformer_encoder_block(params, i, X, config) {
  const prefix = `encoder.blks.${i}`, { num_heads, norm_first, activation } = config;
  let H = sublayer_input(params, `${prefix}.addnorm1`, X, norm_first);
  const attention = multi_head_attention(params, `${prefix}.self_attention`, num_heads, H, H, H);
  X = add_norm(params, `${prefix}.addnorm1`, X, attention.output, norm_first);
  H = sublayer_input(params, `${prefix}.addnorm2`, X, norm_first);
  const ffn = position_wise_ffn(H, dense(params, `${prefix}.ffn.dense1`),
                                dense(params, `${prefix}.ffn.dense2`), activation);
  return { X: add_norm(params, `${prefix}.addnorm2`, X, ffn, norm_first), weights: attention.weights };
}

function dense(params, prefix) {
  return { weight: params[`${prefix}.weight`], bias: params[`${prefix}.bias`] };
}

function final_norm(params, prefix, X, norm_first) {
  return norm_first ? layer_norm(X, params[`${prefix}.weight`], params[`${prefix}.bias`]) : X;
}

// transformer.TransformerEncoder.forward: one vector per source token, and every block's
// self-attention weights (attention_weights[i][head][query][key]).
export function transformer_encoder(model, tokens) {
  const { params, config, P } = model;
  let X = embed(params["encoder.embedding.weight"], tokens, P, 0);
  const attention_weights = [];
  for (let i = 0; i < config.num_blks; i++) {
    const block = transformer_encoder_block(params, i, X, config);
    X = block.X;
    attention_weights.push(block.weights);
  }
  return { outputs: final_norm(params, "encoder.final_norm", X, config.norm_first), attention_weights };
}

// transformer_decoder.DecoderState.empty: the encoder's outputs and an empty key/value cache.
export function init_state(enc_outputs, num_blks) {
  const empty = () => Array.from({ length: num_blks }, () => null);
  return { enc_outputs, keys: empty(), values: empty(), cross_keys: empty(), cross_values: empty(),
           num_decoded_steps: 0 };
}

// transformer_decoder.TransformerDecoderBlock.forward on the new positions X: masked
// self-attention over every position decoded so far (the cache), encoder-decoder attention,
// then the FFN.
export function transformer_decoder_block(params, i, X, state, config) {
  const prefix = `decoder.blks.${i}`, { num_heads, norm_first, activation } = config;
  // 1. Masked self-attention; the new keys and values join the cached ones.
  let H = sublayer_input(params, `${prefix}.addnorm1`, X, norm_first);
  let K = project_heads(params[`${prefix}.self_attention.W_k.weight`], H, num_heads);
  let V = project_heads(params[`${prefix}.self_attention.W_v.weight`], H, num_heads);
  if (state.keys[i] !== null) {
    K = K.map((k, h) => state.keys[i][h].concat(k));
    V = V.map((v, h) => state.values[i][h].concat(v));
  }
  state.keys[i] = K;
  state.values[i] = V;
  // New query t sits at position num_cached + t and may see keys 0..num_cached + t.
  const mask = causal_mask(H.length, K[0].length, "bottom-right");
  const self_attention = attend_projected(params, `${prefix}.self_attention`, num_heads, H, K, V, mask);
  X = add_norm(params, `${prefix}.addnorm1`, X, self_attention.output, norm_first);
  // 2. Encoder-decoder attention, the encoder's outputs projected once per sentence.
  if (state.cross_keys[i] === null) {
    state.cross_keys[i] = project_heads(params[`${prefix}.cross_attention.W_k.weight`], state.enc_outputs, num_heads);
    state.cross_values[i] = project_heads(params[`${prefix}.cross_attention.W_v.weight`], state.enc_outputs, num_heads);
  }
  H = sublayer_input(params, `${prefix}.addnorm2`, X, norm_first);
  const cross = attend_projected(params, `${prefix}.cross_attention`, num_heads, H,
                                 state.cross_keys[i], state.cross_values[i]);
  X = add_norm(params, `${prefix}.addnorm2`, X, cross.output, norm_first);
  // 3. Position-wise feed-forward network.
  H = sublayer_input(params, `${prefix}.addnorm3`, X, norm_first);
  const ffn = position_wise_ffn(H, dense(params, `${prefix}.ffn.dense1`),
                                dense(params, `${prefix}.ffn.dense2`), activation);
  return { X: add_norm(params, `${prefix}.addnorm3`, X, ffn, norm_first),
           self_weights: self_attention.weights, cross_weights: cross.weights };
}

// transformer_decoder.TransformerDecoder.forward: logits of the new tokens, which follow the
// positions cached in `state`, and every block's weights (self_attention_weights[i] and
// cross_attention_weights[i], [head][new position][key]).
export function transformer_decoder(model, tokens, state) {
  const { params, config, P } = model;
  let X = embed(params["decoder.embedding.weight"], tokens, P, state.num_decoded_steps);
  const self_attention_weights = [], cross_attention_weights = [];
  for (let i = 0; i < config.num_blks; i++) {
    const block = transformer_decoder_block(params, i, X, state, config);
    X = block.X;
    self_attention_weights.push(block.self_weights);
    cross_attention_weights.push(block.cross_weights);
  }
  state.num_decoded_steps += tokens.length;
  X = final_norm(params, "decoder.final_norm", X, config.norm_first);
  const logits = linear(X, params["decoder.dense.weight"], params["decoder.dense.bias"]);
  return { logits, self_attention_weights, cross_attention_weights };
}

// decoding.greedy_decode for one sentence: feed <bos>, then each most probable token, until
// <eos> or max_len tokens. Each step keeps its logits and the weights of its new position in
// every block and head, and how long it took (performance.now(), in milliseconds).
export function greedy_decode(model, src, bos, eos, max_len) {
  let start = performance.now();
  const encoded = transformer_encoder(model, src);
  const encoder_ms = performance.now() - start;
  const state = init_state(encoded.outputs, model.config.num_blks);
  const steps = [];
  let token = bos;
  for (let step = 0; step < max_len; step++) {
    start = performance.now();
    const out = transformer_decoder(model, [token], state);
    const logits = out.logits[out.logits.length - 1];
    token = argmax(log_softmax(logits));
    steps.push({
      token,
      logits,
      decoder_self: out.self_attention_weights.map((heads) => heads.map((w) => w[w.length - 1])),
      cross: out.cross_attention_weights.map((heads) => heads.map((w) => w[w.length - 1])),
      ms: performance.now() - start,
    });
    if (token === eos) break;
  }
  return { encoder: encoded.attention_weights, encoder_ms, steps };
}

// A translator from its exported files (model.json and the weights' state_dict).
export function translator(manifest, params) {
  const { config } = manifest;
  return { config, params, P: sinusoidal_table(config.max_len, config.num_hiddens) };
}
