import io
import math
import sys

import pytest
import sacrebleu
import torch
from matplotlib.figure import Figure
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from attention_book.training import (
    History,
    accuracy,
    bleu,
    classification_loss,
    evaluate_accuracy,
    evaluate_loss,
    fit,
    get_device,
    set_seed,
)


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def one_thread():
    # These models are tiny: one thread is fastest, and on a shared, busy CPU several
    # OpenMP threads waiting for each other make an epoch up to 20 times slower.
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)


def _regression_loader(seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 3, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(96, generator=generator)
    return DataLoader(
        TensorDataset(x, y),
        batch_size=16,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )


def _mse(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x).squeeze(-1), y)


def _train(seed: int) -> History:
    set_seed(seed)
    model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))
    return fit(
        model, _regression_loader(seed), _mse, num_epochs=3, lr=0.01, device="cpu", seed=seed
    )


# --- the training loop -----------------------------------------------------------------------


def test_same_seed_gives_same_loss_curve_on_cpu():
    first, second = _train(seed=3), _train(seed=3)
    assert first.train_loss == second.train_loss
    assert first.train_loss != _train(seed=4).train_loss


def test_fit_decreases_loss_and_records_metrics():
    set_seed(0)
    model = nn.Linear(3, 1)
    loader = _regression_loader(0)
    calls = []

    def valid_fn(model):
        calls.append(model.training)
        return {"valid_loss": evaluate_loss(model, loader, _mse), "answer": 42}

    history = fit(model, loader, _mse, num_epochs=5, lr=0.05, device="cpu", valid_fn=valid_fn)
    assert history.num_epochs == 5 == len(history.epoch_seconds)
    assert history.train_loss[-1] < history.train_loss[0] / 2
    assert history.metrics["answer"] == [42.0] * 5
    assert calls == [False] * 5  # metrics are computed in eval mode
    assert not model.training


def test_epoch_loss_is_weighted_by_the_returned_weight():
    # Two batches with losses 1 and 3 weighing 1 and 3 tokens: mean 2.5, not 2.
    loader = [torch.tensor([1.0]), torch.tensor([3.0])]
    weights = {1.0: 1.0, 3.0: 3.0}
    model = nn.Linear(1, 1)

    def loss_fn(model, batch):
        value = batch[0]
        return value + 0 * model.weight.sum(), weights[float(value)]

    history = fit(model, loader, loss_fn, num_epochs=1, lr=0.0, device="cpu", progress=False)
    assert history.train_loss == [pytest.approx(2.5)]


def test_grad_clip_bounds_the_update():
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)
    loader = [(torch.tensor([[1000.0]]), torch.tensor([0.0]))]

    def loss_fn(model, batch):
        x, _ = batch
        return (model(x) - 1000.0**2).pow(2).mean()

    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    fit(model, loader, loss_fn, num_epochs=1, optimizer=optimizer, grad_clip=0.5, device="cpu")
    assert abs(model.weight.item()) == pytest.approx(0.5)


def test_fit_rejects_non_scalar_loss_and_negative_epochs():
    model = nn.Linear(3, 1)
    loader = _regression_loader(0)
    with pytest.raises(ValueError, match="scalar"):
        fit(model, loader, lambda m, b: m(b[0]), num_epochs=1, device="cpu")
    with pytest.raises(ValueError, match="num_epochs"):
        fit(model, loader, _mse, num_epochs=-1, device="cpu")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal_unless_told(monkeypatch):
    model = nn.Linear(3, 1)
    for stream_class, progress, shown in [
        (io.StringIO, None, False),  # auto, not a terminal (CI, builds): quiet
        (_Terminal, None, True),  # auto, a person watching: a bar
        (_Terminal, False, False),  # quiet when asked
        (io.StringIO, True, True),  # forced
    ]:
        stream = stream_class()
        monkeypatch.setattr(sys, "stderr", stream)
        fit(model, _regression_loader(0), _mse, num_epochs=1, device="cpu", progress=progress)
        assert ("epoch 1/1" in stream.getvalue()) == shown, (stream_class, progress)


def test_fit_trains_when_called_under_no_grad():
    # A figure that asks for a trained model may run under torch.no_grad(); training a model
    # that is not cached yet must still work.
    model = nn.Linear(3, 1)
    before = model.weight.detach().clone()
    with torch.no_grad():
        history = fit(model, _regression_loader(0), _mse, num_epochs=2, device="cpu")
        assert not torch.is_grad_enabled()  # the caller's mode is restored
    assert not torch.equal(model.weight, before) and len(history.train_loss) == 2


def test_no_progress_bar_in_a_process_that_only_imported_ipykernel(monkeypatch):
    # Tools that start notebook kernels import ipykernel; that is not a person watching.
    import ipykernel  # noqa: F401

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    fit(nn.Linear(3, 1), _regression_loader(0), _mse, num_epochs=1, device="cpu")
    assert "epoch 1/1" not in stream.getvalue()


def test_classification_helpers():
    set_seed(0)
    x = torch.randn(64, 2)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    model = nn.Linear(2, 2)
    fit(model, loader, classification_loss, num_epochs=30, lr=0.1, device="cpu")
    assert evaluate_accuracy(model, loader) > 0.9


def test_get_device_matches_cuda_availability():
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_history_plot_returns_a_figure_with_loss_and_metric_panels():
    history = History([2.0, 1.0], {"valid_loss": [2.5, 1.5], "bleu": [3.0, 9.0]}, [0.1, 0.1])
    figure = history.plot(title="demo")
    assert isinstance(figure, Figure)
    assert len(figure.axes) == 2
    assert len(figure.axes[0].lines) == 2  # train and valid loss share a panel
    assert len(History([1.0]).plot().axes) == 1


# --- metrics ---------------------------------------------------------------------------------


def test_accuracy():
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert accuracy(logits, torch.tensor([1, 0, 0, 0])) == 0.75
    with pytest.raises(ValueError, match="labels"):
        accuracy(logits, torch.tensor([1, 0]))


def test_bleu_identical_is_100_and_disjoint_is_0():
    sentences = ["the cat sat on the mat .", "we sold ninety-seven tickets ."]
    assert bleu(sentences, sentences) == pytest.approx(100.0)
    assert bleu([s.split() for s in sentences], [s.split() for s in sentences]) == pytest.approx(
        100.0
    )
    assert bleu(["a b c d e"], ["v w x y z"]) == 0.0


def test_bleu_matches_sacrebleu_on_token_lists_and_strings():
    hypotheses = ["il a couru 5 kilomètres .", "nous avons vendu dix billets hier ."]
    references = ["elle a couru 5 kilomètres .", "nous avons vendu dix billets ."]
    expected = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none").score
    tokens = bleu([h.split() for h in hypotheses], [r.split() for r in references])
    assert tokens == pytest.approx(expected)
    assert 0 < tokens < 100
    expected_13a = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert bleu(hypotheses, references) == pytest.approx(expected_13a)


def test_bleu_known_value_by_hand():
    # Every 1- to 4-gram of the hypothesis is in the reference (precisions all 1), but the
    # hypothesis is shorter: BLEU = 100 * brevity penalty = 100 * exp(1 - 8/7).
    hypothesis = ["a", "b", "c", "d", "e", "f", "g"]
    reference = ["a", "b", "c", "d", "e", "f", "g", "h"]
    bp = math.exp(1 - 8 / 7)
    assert bleu([hypothesis], [reference]) == pytest.approx(100 * bp)


def test_bleu_on_token_lists_does_not_warn_about_tokenized_input(capsys):
    sentences = [["nous", "avons", "vendu", "dix", "billets", "."]] * 120
    bleu(sentences, sentences)
    assert "detokenize" not in capsys.readouterr().err


def test_bleu_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        bleu(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        bleu([], [])


class _TinyTranslator(nn.Module):
    """Enough of an encoder-decoder to exercise the loop on real translation batches."""

    def __init__(self, src_vocab_size, tgt_vocab_size, num_hiddens=16):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, num_hiddens)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, num_hiddens)
        self.encoder = nn.GRU(num_hiddens, num_hiddens, batch_first=True)
        self.decoder = nn.GRU(num_hiddens, num_hiddens, batch_first=True)
        self.dropout = nn.Dropout(0.1)
        self.dense = nn.Linear(num_hiddens, tgt_vocab_size)

    def forward(self, src, tgt_input):
        _, state = self.encoder(self.src_embedding(src))
        outputs, _ = self.decoder(self.dropout(self.tgt_embedding(tgt_input)), state)
        return self.dense(outputs)  # (batch, num_steps, tgt_vocab_size)


def _translation_loss(model, batch):
    src, _, tgt_input, tgt_valid_len, tgt_label = batch
    logits = model(src, tgt_input)
    mask = torch.arange(tgt_label.shape[1])[None, :] < tgt_valid_len[:, None]
    losses = nn.functional.cross_entropy(logits.transpose(1, 2), tgt_label, reduction="none")
    return (losses * mask).sum() / mask.sum(), float(mask.sum())


def test_same_seed_gives_same_split_and_loss_curve_for_translation(tmp_cache):
    from attention_book.data import load_translation_data

    def run(seed):
        data = load_translation_data(batch_size=32, num_pairs=300, seed=seed, bucket_by_length=True)
        set_seed(seed)
        model = _TinyTranslator(len(data.src_vocab), len(data.tgt_vocab))
        history = fit(
            model, data.train_loader, _translation_loss, 2, lr=0.01, device="cpu", seed=seed
        )
        return data.test_pairs, history.train_loss

    first, second, other = run(0), run(0), run(1)
    assert first == second
    assert first[0] != other[0] and first[1] != other[1]
    assert first[1][1] < first[1][0]
