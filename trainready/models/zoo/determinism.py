"""A built model's training step made deterministic: every dropout probability set to zero.

Libraries hard-code some dropout in the modeling code rather than the config (diffusers' UNet3D
temporal convolutions at 0.1, DiT's class-label dropout for classifier-free guidance at 0.1, a
timm relative-position MLP at 0.125), so zeroing config fields is not enough: a random draw per
step would make two runs of one model train differently. `zero_dropout` walks the modules.
"""

from __future__ import annotations

from torch import nn

# Attributes holding a drop probability: nn.Dropout*'s `p`, timm's DropPath `drop_prob`,
# diffusers' LabelEmbedding `dropout_prob`.
DROP_ATTRS = ("p", "drop_prob", "dropout_prob")


def zero_dropout(model: nn.Module) -> list[str]:
    """Set every drop probability of `model` to 0 in place; the modules changed, by name."""
    changed = []
    for name, module in model.named_modules():
        for attr in DROP_ATTRS:
            value = getattr(module, attr, None)
            if isinstance(value, float) and value > 0:
                setattr(module, attr, 0.0)
                changed.append(f"{name}.{attr}")
    return changed
