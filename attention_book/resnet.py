"""A small residual network: the convolutional baseline of the Vision Transformer chapter.

Two 3x3 convolutions with batch norm and a shortcut make a residual block (He et al., 2016);
`SmallResNet` stacks three of them between a 3x3 stem and global average pooling. Its
inductive biases (local filters, weights shared across positions, pooling) are what the
Vision Transformer does without, which is why the chapter compares the two.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["ResidualBlock", "SmallResNet"]


# --8<-- [start:cnn]
class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a shortcut, as in ResNet (He et al., 2016).

    Args:
        in_channels: Channels of the input.
        out_channels: Channels of the output.
        stride: Stride of the first convolution (2 halves the height and width).

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, out_channels, height // stride, width // stride)``
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:  # match the shape with a 1x1 conv
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, X: Tensor) -> Tensor:
        """Map feature maps ``X`` to new ones: ``relu(F(X) + shortcut(X))``."""
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        return F.relu(Y + self.shortcut(X))


class SmallResNet(nn.Module):
    """A three-block ResNet for small images: the CNN the ViT is compared with.

    A 3x3 stem, one block at full resolution, one that halves it and doubles the channels,
    one more, then global average pooling and a linear classifier.

    Args:
        channels: Channels of the first stage.
        num_classes: Number of classes.
        in_channels: Channels of the images.

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, num_classes)`` logits
    """

    def __init__(self, channels: int, num_classes: int = 10, *, in_channels: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            ResidualBlock(channels, channels),
            ResidualBlock(channels, 2 * channels, stride=2),
            ResidualBlock(2 * channels, 2 * channels),
            nn.AdaptiveAvgPool2d(1),  # (batch, 2 * channels, 1, 1)
            nn.Flatten(),  # (batch, 2 * channels)
            nn.Linear(2 * channels, num_classes),
        )

    def forward(self, X: Tensor) -> Tensor:
        """Map a batch of images ``X`` to class logits."""
        return self.net(X)


# --8<-- [end:cnn]
