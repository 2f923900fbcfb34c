"""The book's experiments: what the chapters train and measure, apart from how it is drawn.

One module per chapter that runs an experiment, each read top to bottom in the order of the
experiment (configuration, data, models, training, evaluation):

- `attention_book.experiments.nadaraya_watson`: the estimators of the attention-pooling
  chapter on one data set, with bandwidths chosen by leave-one-out and their test errors.
- `attention_book.experiments.scoring`: what scaling by 1/sqrt(d) does to dot-product scores.
- `attention_book.experiments.bahdanau`: two GRU translators, with and without Bahdanau
  attention, trained once and cached; BLEU by source length.
- `attention_book.experiments.multihead`: one wide attention head against several narrow
  ones on a task that asks for two relations at once.
- `attention_book.experiments.self_attention`: convolution, GRU and self-attention timed
  against sequence length, and how far back each one's gradient reaches.
- `attention_book.experiments.transformer`: the Transformer on the Bahdanau chapter's data and
  split (label smoothing, warmup), a length-generalization split for both attention models,
  post-norm against pre-norm, and decoding with and without the key/value cache.
- `attention_book.experiments.vit`: a small ViT against a small ResNet on scikit-learn's
  digits, at several training-set sizes and seeds; attention maps and distances.
- `attention_book.experiments.flash`: peak memory of naive and tiled attention, the roofline
  model, and the GPUs' public specifications.
- `attention_book.experiments.optimizations`: a character-level GPT on the corpus's French
  side and its variants (grouped and multi-query attention, sinusoidal positions, linear
  attention), generation with and without the cache, attention timings, receptive fields.

A training run is cached with `attention_book.training.cached` under
`attention_book.training.experiment_key`, which covers the package's source, the corpus
version and the library versions, so an edit of any code it runs trains again. The figures of
`attention_book.figures` import these functions and draw their results. The modules are not
imported here: import the one you need.
"""
