"""The diffusers zoo (trainready/models/zoo/diffusers.py): every model builds tiny and trains on
its denoising loss in float32 and float64 (float64 end to end), reproducibly."""

from __future__ import annotations

import pytest
import torch

from tests.support import zoo_checks
from trainready.models.zoo import diffusers as diffusers_zoo

try:
    NAMES = diffusers_zoo.model_names()
except ImportError as e:
    pytest.skip(f"the diffusers extra is not installed: {e}", allow_module_level=True)


# The fast loop checks one model of each kind; CI checks them all (about 40 s of CPU).
FAST = ("unet2d_condition", "dit", "autoencoder_kl")


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in NAMES]
)
def test_model_trains_in_float32_and_float64(name):
    zoo_checks.check_model(diffusers_zoo.build, name)


def test_zoo_covers_the_architectures():
    classes = {s.cls for s in diffusers_zoo.SPECS.values()}
    wanted = {"UNet2DModel", "UNet2DConditionModel", "DiTTransformer2DModel", "Transformer2DModel"}
    assert wanted <= classes
    assert all(diffusers_zoo.build(n).modality == "diffusion" for n in NAMES[:1])


def test_noise_prediction_loss_is_mse_of_the_noised_sample():
    """The loss is computed from the scheduler's noised sample: predicting the true noise exactly
    (a model that returns it) gives zero loss, predicting zeros gives the noise's mean square."""
    model = diffusers_zoo.build("unet2d")
    batch = model.make_batch(1)
    seen = {}

    def oracle(noisy, timestep, return_dict):
        seen["noisy"] = noisy
        return (batch["noise"] + 0 * noisy,)

    model.model.forward = oracle
    assert model(**batch).loss.item() == 0.0
    a = model.alphas_cumprod[batch["timesteps"]].view(-1, 1, 1, 1)
    want = a.sqrt() * batch["x0"] + (1 - a).sqrt() * batch["noise"]
    torch.testing.assert_close(seen["noisy"], want)
    model.model.forward = lambda noisy, timestep, return_dict: (torch.zeros_like(noisy),)
    torch.testing.assert_close(model(**batch).loss, batch["noise"].square().mean())


def test_unknown_name_is_a_one_line_error():
    with pytest.raises(ValueError, match="not a diffusers zoo model; one of: unet2d"):
        diffusers_zoo.build("nope")
