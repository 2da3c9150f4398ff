"""Builders for named architectures.

Examples
--------
>>> from memtheory.models import vgg16
>>> vgg16(batch=1).summary().activation_count
15095272
"""

from memtheory.models.vgg import VGG16_CONFIG, vgg, vgg16

__all__ = ["VGG16_CONFIG", "vgg", "vgg16"]
