// From a sentence to token indices, as attention_book/data/text.py does it: preprocess,
// tokenize, Vocab, and the source row of build_arrays.

// Python's str.split() and \s split on the characters str.isspace() accepts; JavaScript's \s
// is another set (it has U+FEFF, lacks U+001C-U+001F and U+0085). This class is Python's.
const SPACE = "\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const SPACES = new RegExp(`[${SPACE}]+`, "u");
// A punctuation mark that ends a word: preceded by a non-space, followed by a space or the end.
const PUNCTUATION_AT_WORD_END = new RegExp(`(?<=[^${SPACE}])([,.!?;:])(?=[${SPACE}]|$)`, "gu");

// preprocess: lowercase, non-breaking spaces (U+00A0, U+202F) as spaces, a space before a
// punctuation mark that ends a word, and runs of spaces collapsed.
export function preprocess(text) {
  text = text.replaceAll("\u202f", " ").replaceAll("\xa0", " ").toLowerCase();
  text = text.replace(PUNCTUATION_AT_WORD_END, " $1");
  return text.split(SPACES).filter((word) => word !== "").join(" ");
}

// tokenize: the words and punctuation marks of a preprocessed sentence.
export function tokenize(sentence) {
  const text = preprocess(sentence);
  return text === "" ? [] : text.split(" ");
}

// Vocab: the exported idx_to_token list; a token it lacks maps to <unk>.
export class Vocab {
  constructor(idx_to_token) {
    this.idx_to_token = idx_to_token;
    this.token_to_idx = new Map(idx_to_token.map((token, index) => [token, index]));
    this.pad = this.token_to_idx.get("<pad>");
    this.bos = this.token_to_idx.get("<bos>");
    this.eos = this.token_to_idx.get("<eos>");
    this.unk = this.token_to_idx.get("<unk>");
  }

  get length() {
    return this.idx_to_token.length;
  }

  // vocab[tokens]: the index of each token, <unk> for those it lacks.
  indices(tokens) {
    return tokens.map((token) => this.token_to_idx.get(token) ?? this.unk);
  }

  to_tokens(indices) {
    return indices.map((index) => this.idx_to_token[index]);
  }
}

// One row of build_arrays without its padding: the indices, then <eos>, cut to num_steps.
export function source_indices(tokens, vocab, num_steps) {
  return [...vocab.indices(tokens), vocab.eos].slice(0, num_steps);
}
