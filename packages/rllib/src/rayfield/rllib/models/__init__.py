"""Models, preprocessors, action distributions and the `ModelCatalog`."""

from __future__ import annotations

from rayfield.rllib.models.catalog import MODEL_DEFAULTS, ModelCatalog
from rayfield.rllib.models.preprocessors import (
    Preprocessor,
    get_preprocessor,
    restore_original_dimensions,
)

__all__ = [
    "MODEL_DEFAULTS",
    "ModelCatalog",
    "Preprocessor",
    "get_preprocessor",
    "restore_original_dimensions",
]
