"""The book's experiments: what the chapters train and measure, apart from how it is drawn.

One module per chapter that runs an experiment, each read top to bottom in the order of the
experiment (configuration, data, models, training, evaluation):

- `attention_book.experiments.nadaraya_watson`: the estimators of the attention-pooling
  chapter on one data set, with bandwidths chosen by leave-one-out and their test errors.
- `attention_book.experiments.scoring`: what scaling by 1/sqrt(d) does to dot-product scores.
- `attention_book.experiments.bahdanau`: two GRU translators, with and without Bahdanau
  attention, trained once and cached; BLEU by source length.
- `attention_book.experiments.flash`: peak memory of naive and tiled attention, the roofline
  model, and the GPUs' public specifications.

A training run is cached with `attention_book.training.cached` under
`attention_book.training.experiment_key`, which covers the package's source, the corpus
version and the library versions, so an edit of any code it runs trains again. The figures of
`attention_book.figures` import these functions and draw their results. The modules are not
imported here: import the one you need.
"""
