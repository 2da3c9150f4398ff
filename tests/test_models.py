"""Named architectures against their published numbers."""

from memtheory.models import vgg16
from memtheory.symbols import H


def test_vgg16_parameter_count_matches_torchvision():
    """VGG-16 has 138,357,544 parameters (torchvision's model card for vgg16)."""
    assert vgg16(batch=1).parameter_count == 138_357_544


def test_vgg16_activations_match_cs231n_table_minus_input_plus_dropout():
    """CS231n's per-layer VGG-16 table sums to 15,237,608 values with the 224x224x3 input.

    memtheory counts the input separately, ReLUs in place (no new memory), and the two
    dropout outputs of 4096 values that the table does not list.
    """
    cs231n_table_total = 15_237_608
    net = vgg16(batch=1)
    assert net.activation_count == cs231n_table_total - 224 * 224 * 3 + 2 * 4096


def test_vgg16_symbolic_image_size_agrees_with_numeric():
    """VGG-16 built over the symbol H gives the 224 network's counts at H=224."""
    symbolic = vgg16(image_size=H, batch=1).summary(H=224)
    numeric = vgg16(batch=1).summary()
    assert symbolic.parameter_count == numeric.parameter_count
    assert symbolic.activation_count == numeric.activation_count
