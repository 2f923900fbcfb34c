import torch

from attention_book.memory import measure_tensor_memory


def test_measure_tensor_memory_counts_live_tensors():
    def two_temporaries(x):
        a = x * 2  # 4000 bytes
        b = a + 1  # 4000 bytes, a still alive: peak 8000
        del a
        return b.sum()  # b alive while the 4-byte sum is made

    _, peak, largest = measure_tensor_memory(two_temporaries, torch.zeros(1000))
    assert largest == 4000
    assert peak == 8000


def test_inputs_and_views_of_them_are_not_counted():
    x = torch.zeros(1000)
    result, peak, largest = measure_tensor_memory(lambda t: t[:10].view(2, 5), x)
    assert result.shape == (2, 5)
    assert (peak, largest) == (0, 0)


def test_meta_tensors_are_counted_without_data():
    q = torch.empty(1, 1, 256, 64, device="meta")
    _, peak, largest = measure_tensor_memory(lambda t: t @ t.transpose(-2, -1), q)
    assert largest == peak == 256 * 256 * 4
