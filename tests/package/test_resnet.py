import torch

from attention_book.resnet import ResidualBlock, SmallResNet


def test_small_resnet_maps_images_of_any_size_and_channels_to_logits():
    assert SmallResNet(8, 3, in_channels=2)(torch.randn(2, 2, 16, 16)).shape == (2, 3)
    assert SmallResNet(16)(torch.randn(4, 1, 8, 8)).shape == (4, 10)


def test_a_residual_block_halves_the_size_and_projects_the_shortcut_when_it_must():
    same = ResidualBlock(4, 4)
    assert isinstance(same.shortcut, torch.nn.Identity)
    assert same(torch.randn(1, 4, 6, 6)).shape == (1, 4, 6, 6)
    down = ResidualBlock(4, 8, stride=2)
    assert not isinstance(down.shortcut, torch.nn.Identity)
    assert down(torch.randn(1, 4, 6, 6)).shape == (1, 8, 3, 3)
