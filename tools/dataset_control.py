"""encode_dataset.py's control samples for the VACE models (--control): the context the VACE branch
reads, laid out as the official VACE pipeline prepares it (docs/control.md):

- the control video split by its mask (1 = generate), thresholded at 0.5: inactive = video where
  the mask is 0, reactive = video where it is 1, each VAE-encoded (2 x C channels);
- the mask itself, unthresholded, folded onto the latent grid: channel 8 * row + column of each
  8 x 8 pixel cell (spatial stride squared), nearest-exact in time to the latent frames;
- reference images, each letterboxed on white to the bucket's size, one latent frame each,
  prepended in time: to the latents (their latents) and to the context (their latents beside zeros,
  with a zero mask), in the order given.

Without a mask the mask is all ones (the control mode: pose, depth, edges); without a control
video the control is zeros (gray in [-1, 1]), as the official pipeline fills it."""
import torch


def mask_channels(mask, latent_frames, spatial):
    """[F, H, W] in [0, 1] -> [spatial^2, latent_frames, H / spatial, W / spatial]."""
    f, h, w = mask.shape
    cells = mask.reshape(f, h // spatial, spatial, w // spatial, spatial).permute(2, 4, 0, 1, 3).flatten(0, 1)
    return torch.nn.functional.interpolate(cells.unsqueeze(0), size=(latent_frames, h // spatial, w // spatial),
                                           mode="nearest-exact").squeeze(0)


def letterboxed(image, height, width):
    """[3, H, W] in [-1, 1] scaled to fit (height, width), centred on white."""
    scale = min(height / image.shape[1], width / image.shape[2])
    h, w = int(image.shape[1] * scale), int(image.shape[2] * scale)
    resized = torch.nn.functional.interpolate(image.unsqueeze(0), size=(h, w), mode="bilinear",
                                              align_corners=False).squeeze(0)
    canvas = torch.ones(3, height, width, dtype=image.dtype)
    top, left = (height - h) // 2, (width - w) // 2
    canvas[:, top:top + h, left:left + w] = resized
    return canvas


def control_fields(encoders, target, control=None, mask=None, references=()):
    """The latents and vace_context of a control sample: `target` and `control` [3, F, H, W] in
    [-1, 1], `mask` [F, H, W] in [0, 1], `references` [3, h, w] in [-1, 1] each. Returns
    {"latents": [C, R + F', H', W'], "vace_context": [2C + spatial^2, R + F', H', W']}."""
    control = torch.zeros_like(target) if control is None else control
    mask = torch.ones_like(control[0]) if mask is None else mask
    binary = (mask > 0.5).to(control.dtype).unsqueeze(0)
    inactive, reactive = encoders.latents(control * (1 - binary)), encoders.latents(control * binary)
    latents = encoders.latents(target)
    cells = mask_channels(mask.float(), latents.shape[1], encoders.spatial).to(latents.dtype)
    context = torch.cat([inactive, reactive, cells])
    _, _, height, width = target.shape
    firsts, context_firsts = [], []
    for image in references:
        reference = encoders.latents(letterboxed(image, height, width).unsqueeze(1))  # [C, 1, H', W']
        firsts.append(reference)
        context_firsts.append(torch.cat([reference, torch.zeros_like(reference),
                                         torch.zeros_like(cells[:, :1])]))
    return {"latents": torch.cat([*firsts, latents], 1), "vace_context": torch.cat([*context_firsts, context], 1)}
