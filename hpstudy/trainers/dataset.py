"""What a trainer uses of a dataset: the `Dataset` protocol that every dataset class declares
(hpstudy.trainers.data.TensorData and LoaderData, hpstudy.trainers.prepared.PreparedData,
hpstudy.trainers.device_decode.DeviceDecodeData) and `load_data` returns.

A dataset serves uint8 NCHW image batches with int64 labels; `DeviceBatches` (hpstudy.trainers.data) moves
them to the training device and normalises them there with the dataset's `mean` and `std`. Light: torch is
imported for type checkers only.
"""

from typing import TYPE_CHECKING, Iterable, Optional, Protocol, Tuple, runtime_checkable

if TYPE_CHECKING:
    import torch

Batches = Iterable[Tuple["torch.Tensor", "torch.Tensor"]]  # (uint8 images N x C x H x W, int64 labels N)


@runtime_checkable
class Dataset(Protocol):
    """A training and a validation set of labelled images, served as uint8 batches. In the loaders,
    `pin_memory` asks for page-locked CPU batches and `device` names the training device (None: the CPU):
    a dataset that augments or decodes on the device delivers its batches there, the others on the CPU
    (or on the device they were moved `to`)."""

    num_classes: int
    """How many classes the labels name (labels are 0 .. num_classes - 1)."""
    mean: Tuple[float, ...]
    """Per-channel mean of the images in [0, 1] units, subtracted when batches are normalised."""
    std: Tuple[float, ...]
    """Per-channel standard deviation of the images in [0, 1] units, divided by when batches are normalised."""

    @property
    def num_train(self) -> int:
        """How many training images there are."""

    def to(self, device: "torch.device") -> "Dataset":
        """The dataset to train on `device` from (itself when its data stays where it is)."""

    def steps_per_epoch(self, batch_size: int) -> int:
        """Training batches per epoch: num_train // batch_size (the partial batch dropped), at least 1."""
        return max(1, self.num_train // batch_size)

    def train_loader(
        self,
        batch_size: int,
        generator: "torch.Generator",
        pin_memory: bool = False,
        device: Optional["torch.device"] = None,
    ) -> Batches:
        """An iterable whose every pass is one epoch of shuffled, augmented batches drawn with `generator`."""

    def val_loader(self, batch_size: int, pin_memory: bool = False, device: Optional["torch.device"] = None) -> Batches:
        """An iterable whose every pass is the validation set in order (the last batch may be smaller)."""
