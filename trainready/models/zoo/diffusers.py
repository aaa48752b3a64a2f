"""The diffusers zoo: tiny diffusion models built from a config (never downloaded), trained on the
denoising loss.

A denoiser (UNets, DiT, PixArt, SD3, Flux, Sana...) is trained on noise prediction: the batch
holds the clean sample `x0`, fixed `noise` and integer `timesteps`; `forward` noises the sample
with a DDPMScheduler built from its config (`add_noise(x0, noise, t)`), predicts the noise and
takes the mean square error in at least float32. A model that predicts a learned variance too
(twice the channels) is trained on its first half, as diffusers' pipelines read it. The KL
autoencoder is trained on reconstruction (decoding a reparameterised sample, its noise fixed in
the batch) plus its KL term. The predicted noise (or reconstruction) is the compared output.

Every model is a row of `SPECS` (its diffusers class, a tiny config, the shapes of its inputs);
diffusers' other classes are not attempted yet. Dropout is zeroed after building (some is
hard-coded: `determinism.zero_dropout`). In a float64 run, diffusers' float32 upcasts (the
sinusoidal timestep embedding is computed in float32 whatever the model's dtype) are computed in
float64 (`float64.float32_as_float64`), so the reference is float64 end to end.

    model_names()        -> the names of SPECS, the most common architectures first
    build(name, seed=0)  -> DiffusionTask, a TaskModel (modality "diffusion")
    traits(name)         -> family, conditioning, prediction
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainready.models.task import TaskModel, TaskOutput
from trainready.models.zoo.determinism import zero_dropout
from trainready.models.zoo.float64 import float32_as_float64, is_float64
from trainready.models.zoo.optional import the_library

BATCH = 2
TEXT_LEN = 8  # tokens of synthetic text conditioning (encoder_hidden_states)
TRAIN_TIMESTEPS = 1000
KL_WEIGHT = 1e-3  # the autoencoder's KL term, small beside reconstruction as in latent diffusion


def _flux_ids(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Flux's rotary position ids: (text, 3) zeros and (4 x 4 image tokens, 3) grid positions."""
    rows, cols = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
    image = torch.stack([torch.zeros(16), rows.flatten(), cols.flatten()], dim=-1)
    return {"txt_ids": torch.zeros(TEXT_LEN, 3), "img_ids": image}


def _text_mask(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Every text token attended (Lumina2 requires the mask)."""
    return {"encoder_attention_mask": torch.ones(BATCH, TEXT_LEN, dtype=torch.bool)}


@dataclass(frozen=True)
class Spec:
    """One model of the zoo: what to build and what to feed it."""

    cls: str  # the diffusers class
    config: dict[str, Any]
    sample: tuple[int, ...]  # x0, batch first
    cond: dict[str, tuple[int, ...]] = field(default_factory=dict)  # random normal inputs
    classes: dict[str, int] = field(default_factory=dict)  # integer inputs: name -> classes
    constants: Callable[[torch.Generator], dict[str, torch.Tensor]] | None = None
    fixed: dict[str, Any] = field(default_factory=dict)  # non-tensor keyword arguments
    timestep_scale: float = 1.0  # the model's timestep is t * scale (Flux takes t / 1000)
    kind: str = "noise"  # "noise": noise prediction; "vae": reconstruction + KL
    latent: tuple[int, ...] | None = None  # the vae's latent (its noise's shape)
    conditioning: str = "none"  # traits: what the denoiser is conditioned on besides t


_TEXT = (BATCH, TEXT_LEN, 32)  # synthetic text-encoder states, 32 wide
_LATENT = (BATCH, 4, 8, 8)

SPECS: dict[str, Spec] = {
    "unet2d": Spec(
        "UNet2DModel",
        dict(
            sample_size=16,
            in_channels=3,
            out_channels=3,
            layers_per_block=1,
            block_out_channels=(16, 32),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
            attention_head_dim=8,
        ),
        (BATCH, 3, 16, 16),
    ),
    "unet2d_condition": Spec(
        "UNet2DConditionModel",
        dict(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            layers_per_block=1,
            block_out_channels=(16, 32),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=8,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "dit": Spec(
        "DiTTransformer2DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            num_layers=2,
            sample_size=8,
            patch_size=2,
            num_embeds_ada_norm=TRAIN_TIMESTEPS,
        ),
        _LATENT,
        classes={"class_labels": 10},
        conditioning="class",
    ),
    "transformer2d": Spec(
        "Transformer2DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            num_layers=1,
            norm_num_groups=4,
            cross_attention_dim=32,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "pixart": Spec(
        "PixArtTransformer2DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=8,
            num_layers=2,
            sample_size=8,
            patch_size=2,
            cross_attention_dim=16,
            caption_channels=32,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        fixed={"added_cond_kwargs": {"resolution": None, "aspect_ratio": None}},
        conditioning="text",
    ),
    "sd3": Spec(
        "SD3Transformer2DModel",
        dict(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=2,
            joint_attention_dim=32,
            caption_projection_dim=16,
            pooled_projection_dim=16,
            out_channels=4,
            pos_embed_max_size=16,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT, "pooled_projections": (BATCH, 16)},
        conditioning="text+pooled",
    ),
    "flux": Spec(
        "FluxTransformer2DModel",
        dict(
            patch_size=1,
            in_channels=8,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=16,
            axes_dims_rope=(4, 6, 6),
        ),
        (BATCH, 16, 8),  # packed latents: 4 x 4 tokens of 8 channels
        cond={"encoder_hidden_states": _TEXT, "pooled_projections": (BATCH, 16)},
        constants=_flux_ids,
        timestep_scale=1 / TRAIN_TIMESTEPS,
        conditioning="text+pooled",
    ),
    "sana": Spec(
        "SanaTransformer2DModel",
        dict(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=2,
            num_cross_attention_heads=2,
            cross_attention_head_dim=8,
            cross_attention_dim=16,
            caption_channels=32,
            sample_size=8,
            patch_size=1,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "aura_flow": Spec(
        "AuraFlowTransformer2DModel",
        dict(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_mmdit_layers=1,
            num_single_dit_layers=1,
            attention_head_dim=8,
            num_attention_heads=2,
            joint_attention_dim=32,
            caption_projection_dim=16,
            out_channels=4,
            pos_embed_max_size=16,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        timestep_scale=1 / TRAIN_TIMESTEPS,  # its embedding multiplies by 1000
        conditioning="text",
    ),
    "lumina2": Spec(
        "Lumina2Transformer2DModel",
        dict(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            hidden_size=32,
            num_layers=1,
            num_refiner_layers=1,
            num_attention_heads=2,
            num_kv_heads=1,
            multiple_of=16,
            axes_dim_rope=(4, 6, 6),
            axes_lens=(32, 32, 32),
            cap_feat_dim=32,
        ),
        _LATENT,
        cond={"encoder_hidden_states": _TEXT},
        constants=_text_mask,
        conditioning="text",
    ),
    "wan": Spec(
        "WanTransformer3DModel",
        dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            text_dim=32,
            freq_dim=32,
            ffn_dim=32,
            num_layers=2,
            rope_max_seq_len=32,
        ),
        (BATCH, 4, 2, 8, 8),  # video latents: channels, frames, height, width
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "unet3d_condition": Spec(
        "UNet3DConditionModel",
        dict(
            in_channels=4,
            out_channels=4,
            down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
            up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
            block_out_channels=(16, 32),
            layers_per_block=1,
            norm_num_groups=8,
            cross_attention_dim=32,
            attention_head_dim=8,
        ),
        (BATCH, 4, 2, 8, 8),
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "cogvideox": Spec(
        "CogVideoXTransformer3DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            time_embed_dim=16,
            text_embed_dim=32,
            num_layers=1,
            sample_width=8,
            sample_height=8,
            sample_frames=5,  # (5 - 1) / 4 + 1 = 2 latent frames
            patch_size=2,
            max_text_seq_length=TEXT_LEN,
        ),
        (BATCH, 2, 4, 8, 8),  # video latents: frames, channels, height, width
        cond={"encoder_hidden_states": _TEXT},
        conditioning="text",
    ),
    "unet1d": Spec(
        "UNet1DModel",
        dict(
            block_out_channels=(8, 8, 16, 16),
            in_channels=4,
            out_channels=4,
            extra_in_channels=0,
            time_embedding_type="positional",
            use_timestep_embedding=True,
            flip_sin_to_cos=False,
            freq_shift=1.0,
            out_block_type="OutConv1DBlock",
            mid_block_type="MidResTemporalBlock1D",
            down_block_types=("DownResnetBlock1D",) * 4,
            up_block_types=("UpResnetBlock1D",) * 3,
            act_fn="swish",
        ),
        (BATCH, 4, 16),
    ),
    "autoencoder_kl": Spec(
        "AutoencoderKL",
        dict(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            block_out_channels=(16, 32),
            latent_channels=4,
            norm_num_groups=8,
            sample_size=16,
        ),
        (BATCH, 3, 16, 16),
        kind="vae",
        latent=(BATCH, 4, 8, 8),
    ),
}


class DiffusionTask(TaskModel):
    """A diffusers model with its training loss (see the module docstring)."""

    modality = "diffusion"

    def __init__(self, model: nn.Module, name: str, spec: Spec, scheduler: Any):
        super().__init__()
        self.model = model
        self.name = name
        self.spec = spec
        self.scheduler = scheduler
        self.traits = traits(name)
        # The scheduler's noise table as a buffer: it follows the model to the device and dtype.
        self.register_buffer("alphas_cumprod", scheduler.alphas_cumprod.clone(), persistent=False)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        s = self.spec
        batch = {
            "x0": torch.randn(s.sample, generator=gen),
            "noise": torch.randn(s.latent or s.sample, generator=gen),
            "timesteps": torch.randint(0, TRAIN_TIMESTEPS, (s.sample[0],), generator=gen),
        }
        batch |= {k: torch.randn(shape, generator=gen) for k, shape in s.cond.items()}
        batch |= {
            k: torch.randint(0, n, (s.sample[0],), generator=gen) for k, n in s.classes.items()
        }
        if s.constants is not None:
            batch |= s.constants(gen)
        return batch

    def forward(self, x0, noise, timesteps, **inputs) -> TaskOutput:
        with float32_as_float64(is_float64(self)):
            if self.spec.kind == "vae":
                return self._vae_loss(x0, noise)
            self.scheduler.alphas_cumprod = self.alphas_cumprod
            noisy = self.scheduler.add_noise(x0, noise, timesteps)
            t = timesteps
            if self.spec.timestep_scale != 1.0:
                t = timesteps.to(noisy.dtype) * self.spec.timestep_scale
            pred = self.model(noisy, timestep=t, **inputs, **self.spec.fixed, return_dict=False)[0]
        if pred.shape[1] == 2 * noise.shape[1]:  # a learned variance beside the noise
            pred = pred[:, : noise.shape[1]]
        return TaskOutput(_mse(pred, noise), pred)

    def _vae_loss(self, x: torch.Tensor, eps: torch.Tensor) -> TaskOutput:
        posterior = self.model.encode(x).latent_dist
        z = posterior.mean + posterior.std * eps  # reparameterised, its noise fixed
        recon = self.model.decode(z).sample
        kl = posterior.kl().mean() / posterior.mean[0].numel()
        return TaskOutput(_mse(recon, x) + KL_WEIGHT * _wide(kl), recon)


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(_wide(pred), _wide(target))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """diffusers logs deprecations and config notes while building; they are not findings."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def import_diffusers() -> Any:
    """diffusers, imported; ImportError with the reason when it cannot be."""
    try:
        import diffusers

        return the_library(diffusers)
    except Exception as e:  # noqa: BLE001 - any failure is the reason diffusers is unavailable
        raise ImportError(f"diffusers does not import: {type(e).__name__}: {e}") from e


def model_names() -> list[str]:
    """The zoo's models (ImportError when diffusers does not import)."""
    import_diffusers()
    return list(SPECS)


def build(name: str, seed: int = 0) -> DiffusionTask:
    """The tiny model with seeded random weights, in float32 on the CPU; ValueError for a name
    not in SPECS."""
    diffusers = import_diffusers()
    if name not in SPECS:
        raise ValueError(f"{name!r} is not a diffusers zoo model; one of: {', '.join(SPECS)}")
    spec = SPECS[name]
    torch.manual_seed(seed)
    with _quiet():
        model = getattr(diffusers, spec.cls)(**spec.config)
        scheduler = diffusers.DDPMScheduler(num_train_timesteps=TRAIN_TIMESTEPS)
    zero_dropout(model)  # hard-coded dropout (UNet3D's temporal convs, DiT's labels)
    return DiffusionTask(model.float().train(), name, spec, scheduler)


def traits(name: str) -> dict[str, str]:
    """What the architecture is, to group results by."""
    spec = SPECS[name]
    family = "autoencoder" if spec.kind == "vae" else "unet" if "UNet" in spec.cls else "dit"
    return {
        "family": family,
        "conditioning": spec.conditioning,
        "prediction": "reconstruction" if spec.kind == "vae" else "noise",
    }
