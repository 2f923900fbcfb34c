"""The book's trained models, run live in the page (``{{ live:NAME }}``).

- `booktools.live.widgets`: the widgets inserted in the pages, and the models added to the site;
- `booktools.live.export`: weights, vocabularies and PyTorch's reference, exported from the
  result store by `booktools.live.translator` and `booktools.live.gpt`;
- `booktools.live.flash`: inputs and PyTorch's outputs for the FlashAttention chapter's WebGPU
  kernels (no model);
- `booktools.live.train`: the training playground's reference trainings in PyTorch, and the
  steps the build's study needed, for the page's JavaScript trainer;
- `booktools.live.check`: the page's numbers against PyTorch's, in the browser check.
"""
