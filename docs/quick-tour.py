# ---
# jupyter:
#   book:
#     builds: One attention layer, end to end, in a notebook
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Quick tour
#
# This page is a Jupyter notebook: the site build runs it from top to bottom and fails if any
# cell raises. [Download the notebook](../notebooks/quick-tour.ipynb) and run it yourself from a
# clone of the book's repository (after `make setup`).
#
# In four code cells we train one attention layer on a lookup task. Each example is a small table of
# (key, value) pairs; a query names one of the keys, and the answer is that key's value. A fixed
# weighted average cannot solve it, because the right row changes from example to example.
# Attention can: it scores the query against every key and averages the values with those
# scores as weights.

# %%
# %matplotlib inline
import torch
from torch import nn

from attention_book.attention import DotProductAttention
from attention_book.plotting import show_heatmaps

torch.manual_seed(0)
num_slots, num_ids, num_hiddens = 8, 8, 16


def make_batch(batch_size: int):
    """Tables of (id, value) pairs in random order, one query id each."""
    rows = [torch.randperm(num_ids)[:num_slots] for _ in range(batch_size)]
    ids = torch.stack(rows)  # (batch, num_slots)
    # (batch, num_slots, num_ids)
    keys = nn.functional.one_hot(ids, num_ids).float()
    values = torch.randn(batch_size, num_slots, 1)  # (batch, num_slots, 1)
    slot = torch.randint(num_slots, (batch_size,))
    rows = torch.arange(batch_size)
    queries = keys[rows, slot][:, None]  # (batch, 1, num_ids)
    targets = values[rows, slot]  # (batch, 1)
    return queries, keys, values, targets


queries, keys, values, targets = make_batch(4)
print("queries", tuple(queries.shape), "keys", tuple(keys.shape))
print("values", tuple(values.shape), "targets", tuple(targets.shape))

# %% [markdown]
# The model projects queries and keys into a shared space and lets scaled dot-product attention
# compare them. It has no other way to reach the values.


# %%
class Lookup(nn.Module):
    """Project queries and keys; pool values with dot-product attention."""

    def __init__(self):
        super().__init__()
        self.W_q = nn.Linear(num_ids, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_ids, num_hiddens, bias=False)
        self.attention = DotProductAttention(dropout=0.0)

    def forward(self, queries, keys, values):
        return self.attention(self.W_q(queries), self.W_k(keys), values)


model = Lookup()
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
losses = []
for _ in range(300):
    queries, keys, values, targets = make_batch(64)
    loss = nn.functional.mse_loss(model(queries, keys, values)[:, 0], targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(f"mean squared error, first step: {losses[0]:.3f}")
print(f"mean squared error, last 20 steps: {sum(losses[-20:]) / 20:.4f}")

# %% [markdown]
# The error falls close to zero: the layer learned to find the matching key. To see how, ask
# every id of one table at once and draw the attention weights. Each query should put almost
# all of its weight on the one key with the same id: a permutation matrix.

# %%
_, keys, values, _ = make_batch(1)
# (1, num_ids, num_ids): one query per id
all_queries = torch.eye(num_ids)[None]
with torch.no_grad():
    model(all_queries, keys, values)
weights = model.attention.attention_weights[0]  # (num_queries, num_keys)
key_ids = keys[0].argmax(-1).tolist()
fig = show_heatmaps(
    weights,
    xlabel="Keys (their ids)",
    ylabel="Query id",
    xticklabels=[str(i) for i in key_ids],
    yticklabels=[str(i) for i in range(num_ids)],
    figsize=(3.5, 3.5),
)
fig

# %%
matching = torch.tensor([key_ids.index(i) for i in range(num_ids)])
hits = (weights.argmax(-1) == matching).sum()
print(f"{int(hits)} of {num_ids} queries weigh the matching key most")
print(f"smallest top weight: {weights.max(-1).values.min():.3f}")

# %% [markdown]
# The chapters take this apart piece by piece: where attention pooling comes from
# ([Attention pooling](../chapters/nadaraya-watson/)), how the scores are computed and masked
# ([Scoring functions](../chapters/scoring-functions/)), how several heads work side by side
# ([Multi-head attention](../chapters/multihead-attention/)), how such layers, stacked, make a
# Transformer ([The Transformer](../chapters/transformer/)), and how a GPU computes attention
# without storing its weights ([FlashAttention](../chapters/flash-attention/)).
