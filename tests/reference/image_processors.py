"""Reference for media/ decoding and preprocessing: transformers' CLIPImageProcessor,
SiglipImageProcessor and Idefics3ImageProcessor (the PIL "slow" processors) re-implemented
with numpy + PIL, step for step (transformers is not installed here), and PIL's
Image.resize itself. Writes cases.safetensors: each case's input image and what PIL / the
processor makes of it; tests/media/image_resize_test.cpp and image_preprocess_test.cpp
compare media::resize / preprocess_image against them.

    image_processors.py --out DIR [--seed N] [--cases all|resize|preprocess]

Tensors: resize.<case>.input / .output (U8 [H, W, 3]); preprocess.<case>.input (U8) and
.pixel_values (F32 [views, 3, side, side]); codec.<case>.file (U8 [bytes], a file PIL wrote)
and .rgb (U8 [H, W, 3], PIL's first frame turned upright by its EXIF orientation and
converted to RGB, as transformers' load_image does), listed in "codec_cases". Metadata "resize_cases" and "preprocess_cases"
(JSON) list every case with its parameters (size and filter; the preprocessor_config.json
object, the budget, whether it is a video frame, and the tile grid).

The visual-token budget (Prism's knobs, not transformers') is defined here as the processor
run with a changed config: max_side caps size.longest_edge; max_tiles lowers the longest edge
one tile at a time until rows * cols <= max_tiles (a 1 x 1 grid always fits); max_tiles 0
turns splitting off. A video frame is processed as an image with splitting off.
"""

import io
import json
import math
import os
import sys

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prism_ref import generator_parser, save_file, seed_everything  # noqa: E402

import torch  # noqa: E402  (safetensors_io writes torch tensors)

OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
IMAGENET_STANDARD_MEAN = [0.5, 0.5, 0.5]
IMAGENET_STANDARD_STD = [0.5, 0.5, 0.5]
IDEFICS3_MAX_IMAGE_SIZE = 4096  # MAX_IMAGE_SIZE in image_processing_idefics3.py

FILTERS = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


# ---- the transforms transformers applies (image_transforms.py) ----------------------------

def pil_resize(image, height, width, resample):
    """transformers' resize(): through a PIL image, back to uint8 HWC."""
    return np.array(Image.fromarray(image, mode="RGB").resize((width, height), resample=resample))


def rescale(image, scale):
    return (image.astype(np.float64) * scale).astype(np.float32)


def normalize(image, mean, std):
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(np.float32)
    mean = np.array(mean, dtype=image.dtype)
    std = np.array(std, dtype=image.dtype)
    return (image - mean) / std


def center_crop(image, crop_height, crop_width):
    """image_transforms.center_crop on HWC uint8, padding with zeros past the edges."""
    orig_height, orig_width = image.shape[:2]
    top = (orig_height - crop_height) // 2
    bottom = top + crop_height
    left = (orig_width - crop_width) // 2
    right = left + crop_width
    if top >= 0 and bottom <= orig_height and left >= 0 and right <= orig_width:
        return image[top:bottom, left:right]
    new_height = max(crop_height, orig_height)
    new_width = max(crop_width, orig_width)
    new_image = np.zeros((new_height, new_width, image.shape[2]), dtype=image.dtype)
    top_pad = math.ceil((new_height - orig_height) / 2)
    left_pad = math.ceil((new_width - orig_width) / 2)
    new_image[top_pad:top_pad + orig_height, left_pad:left_pad + orig_width] = image
    top += top_pad
    bottom += top_pad
    left += left_pad
    right += left_pad
    return new_image[max(0, top):min(new_height, bottom), max(0, left):min(new_width, right)]


def to_pixel_values(image, cfg):
    """rescale, normalise, HWC -> CHW, as the processors end."""
    x = image
    if cfg.get("do_rescale", True):
        x = rescale(x, cfg.get("rescale_factor", 1 / 255))
    if cfg.get("do_normalize", True):
        x = normalize(x, cfg["image_mean"], cfg["image_std"])
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).transpose(2, 0, 1))


def size_dict(value, default_to_square):
    """get_size_dict for an int or a dict."""
    if isinstance(value, int):
        return {"height": value, "width": value} if default_to_square else {"shortest_edge": value}
    return dict(value)


# ---- CLIPImageProcessor ---------------------------------------------------------------------

def clip_output_size(height, width, shortest_edge):
    """get_resize_output_image_size(default_to_square=False)."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = shortest_edge, int(shortest_edge * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def clip_preprocess(image, cfg):
    size = size_dict(cfg.get("size", {"shortest_edge": 224}), default_to_square=False)
    crop = size_dict(cfg.get("crop_size", {"height": 224, "width": 224}), default_to_square=True)
    resample = cfg.get("resample", FILTERS["bicubic"])
    if cfg.get("do_resize", True):
        if "shortest_edge" in size:
            h, w = clip_output_size(*image.shape[:2], size["shortest_edge"])
        else:
            h, w = size["height"], size["width"]
        image = pil_resize(image, h, w, resample)
    if cfg.get("do_center_crop", True):
        image = center_crop(image, crop["height"], crop["width"])
    cfg = dict(cfg)
    cfg.setdefault("image_mean", OPENAI_CLIP_MEAN)
    cfg.setdefault("image_std", OPENAI_CLIP_STD)
    return [to_pixel_values(image, cfg)], 0, 0


# ---- SiglipImageProcessor -------------------------------------------------------------------

def siglip_preprocess(image, cfg):
    size = size_dict(cfg.get("size", {"height": 224, "width": 224}), default_to_square=True)
    image = pil_resize(image, size["height"], size["width"], cfg.get("resample", FILTERS["bicubic"]))
    cfg = dict(cfg)
    cfg.setdefault("image_mean", IMAGENET_STANDARD_MEAN)
    cfg.setdefault("image_std", IMAGENET_STANDARD_STD)
    return [to_pixel_values(image, cfg)], 0, 0


# ---- Idefics3ImageProcessor -----------------------------------------------------------------

def idefics3_resize_output_size(height, width, max_len):
    """get_resize_output_image_size: rescale_to_max_len, then scale_below_upper_bound."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        if height % 2 != 0:
            height += 1
    elif height > width:
        height = max_len
        width = int(height * aspect_ratio)
        if width % 2 != 0:
            width += 1
    height = max(height, 1)
    width = max(width, 1)
    aspect_ratio = width / height
    if width >= height and width > IDEFICS3_MAX_IMAGE_SIZE:
        width = IDEFICS3_MAX_IMAGE_SIZE
        height = int(width / aspect_ratio)
    elif height > width and height > IDEFICS3_MAX_IMAGE_SIZE:
        height = IDEFICS3_MAX_IMAGE_SIZE
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


def idefics3_vision_encoder_size(height, width, tile):
    """resize_for_vision_encoder's target: both sides up to multiples of the tile."""
    aspect_ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = int(width / aspect_ratio)
        height = math.ceil(height / tile) * tile
    elif height > width:
        height = math.ceil(height / tile) * tile
        width = int(height * aspect_ratio)
        width = math.ceil(width / tile) * tile
    return height, width


def idefics3_split(image, tile, resample):
    """split_image: tiles in raster order, then the global view at the tile size."""
    height, width = image.shape[:2]
    frames = []
    if height > tile or width > tile:
        rows = math.ceil(height / tile)
        cols = math.ceil(width / tile)
        opt_h = math.ceil(height / rows)
        opt_w = math.ceil(width / cols)
        for r in range(rows):
            for c in range(cols):
                y0, x0 = r * opt_h, c * opt_w
                frames.append(image[y0:min(y0 + opt_h, height), x0:min(x0 + opt_w, width)])
        if height != tile or width != tile:
            image = pil_resize(image, tile, tile, resample)
    else:
        rows, cols = 0, 0
    frames.append(image)
    return frames, rows, cols


def idefics3_preprocess(image, cfg):
    resample = cfg.get("resample", FILTERS["lanczos"])
    tile = cfg.get("max_image_size", {"longest_edge": 364})["longest_edge"]
    if cfg.get("do_resize", True):
        h, w = idefics3_resize_output_size(*image.shape[:2], cfg.get("size", {"longest_edge": 4 * 364})["longest_edge"])
        image = pil_resize(image, h, w, resample)
    if cfg.get("do_image_splitting", True):
        h, w = idefics3_vision_encoder_size(*image.shape[:2], tile)
        image = pil_resize(image, h, w, resample)
        frames, rows, cols = idefics3_split(image, tile, resample)
    else:
        frames, rows, cols = [pil_resize(image, tile, tile, resample)], 0, 0
    cfg = dict(cfg)
    cfg.setdefault("image_mean", IMAGENET_STANDARD_MEAN)
    cfg.setdefault("image_std", IMAGENET_STANDARD_STD)
    return [to_pixel_values(f, cfg) for f in frames], rows, cols


def idefics3_with_budget(cfg, height, width, max_side=0, max_tiles=-1):
    """The processor config that realises a budget (see the module docstring)."""
    cfg = json.loads(json.dumps(cfg))
    tile = cfg["max_image_size"]["longest_edge"]
    edge = cfg["size"]["longest_edge"]
    if max_side > 0:
        edge = min(edge, max_side)
    if max_tiles == 0:
        cfg["do_image_splitting"] = False
    elif max_tiles > 0 and cfg.get("do_image_splitting", True):
        start = edge
        for k in range(math.ceil(start / tile), 0, -1):
            edge = min(start, k * tile)
            th, tw = idefics3_vision_encoder_size(*idefics3_resize_output_size(height, width, edge), tile)
            if (th // tile) * (tw // tile) <= max_tiles:
                break
    cfg["size"] = {"longest_edge": edge}
    return cfg


PROCESSORS = {
    "CLIPImageProcessor": clip_preprocess,
    "SiglipImageProcessor": siglip_preprocess,
    "Idefics3ImageProcessor": idefics3_preprocess,
}


def preprocess(image, cfg, max_side=0, max_tiles=-1, frame=False):
    """pixel_values [views, 3, side, side], rows, cols under a budget."""
    if cfg["image_processor_type"] == "Idefics3ImageProcessor":
        cfg = idefics3_with_budget(cfg, *image.shape[:2], max_side=max_side, max_tiles=0 if frame else max_tiles)
    views, rows, cols = PROCESSORS[cfg["image_processor_type"]](image, cfg)
    return np.stack(views), rows, cols


# ---- cases ----------------------------------------------------------------------------------

LLAVA_CLIP = {
    "image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 336},
    "crop_size": {"height": 336, "width": 336}, "do_center_crop": True, "do_convert_rgb": True,
    "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
    "rescale_factor": 0.00392156862745098, "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD,
}
SIGLIP = {
    "image_processor_type": "SiglipImageProcessor", "size": {"height": 224, "width": 224},
    "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
    "rescale_factor": 0.00392156862745098, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
}
SMOLVLM = {
    "image_processor_type": "Idefics3ImageProcessor", "size": {"longest_edge": 2048},
    "max_image_size": {"longest_edge": 512}, "do_image_splitting": True, "do_pad": True,
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 1,
    "rescale_factor": 0.00392156862745098, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
}
SMALL_TILES = dict(SMOLVLM, size={"longest_edge": 256}, max_image_size={"longest_edge": 64})

# name, config, (width, height), max_side, max_tiles, frame
PREPROCESS_CASES = [
    ("clip336_landscape", LLAVA_CLIP, (500, 333), 0, -1, False),
    ("clip336_portrait", LLAVA_CLIP, (301, 451), 0, -1, False),
    ("clip336_small_upscaled", LLAVA_CLIP, (120, 90), 0, -1, False),
    ("siglip224", SIGLIP, (640, 480), 0, -1, False),
    ("siglip224_frame", SIGLIP, (320, 180), 0, -1, True),
    ("smolvlm_split_1000x700", SMOLVLM, (1000, 700), 0, -1, False),
    ("smolvlm_no_split_1000x700", SMOLVLM, (1000, 700), 0, 0, False),
    ("small_tiles_split", SMALL_TILES, (200, 130), 0, -1, False),
    ("small_tiles_portrait", SMALL_TILES, (90, 211), 0, -1, False),
    ("small_tiles_max_tiles_4", SMALL_TILES, (200, 130), 0, 4, False),
    ("small_tiles_max_tiles_1", SMALL_TILES, (200, 130), 0, 1, False),
    ("small_tiles_max_side_150", SMALL_TILES, (200, 130), 150, -1, False),
    ("small_tiles_max_side_and_tiles", SMALL_TILES, (333, 120), 190, 3, False),
    ("small_tiles_frame", SMALL_TILES, (200, 130), 0, -1, True),
]

# name, (width, height) in, (width, height) out, filter
RESIZE_CASES = []
for _f in FILTERS:
    RESIZE_CASES += [
        (f"{_f}_down", (97, 61), (40, 23), _f),
        (f"{_f}_up", (31, 17), (80, 50), _f),
        (f"{_f}_up_x_down_y", (50, 70), (120, 30), _f),
        (f"{_f}_vertical_only", (40, 40), (40, 75), _f),
        (f"{_f}_horizontal_only", (64, 20), (23, 20), _f),
        (f"{_f}_far_down", (400, 300), (37, 29), _f),
    ]


def pil_decode_rgb(data):
    """What the HF processors start from (transformers' load_image): the first frame, turned
    upright by its EXIF orientation, convert("RGB")."""
    return np.array(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def with_orientation(image, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encoded(image, "JPEG", quality=90, exif=exif.tobytes())


def encoded(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def codec_files(rng):
    """(name, bytes) of files PIL writes in the variants decoders must handle."""
    rgb = Image.fromarray(test_image(rng, 61, 37))
    alpha = Image.fromarray(rng.integers(0, 256, size=(37, 61), dtype=np.uint8), mode="L")
    rgba = rgb.copy()
    rgba.putalpha(alpha)
    palette = rgb.quantize(colors=17)
    palette.info["transparency"] = 3
    cmyk = Image.fromarray(rng.integers(0, 256, size=(37, 61, 4), dtype=np.uint8), mode="CMYK")
    frame2 = Image.fromarray(test_image(rng, 61, 37)).quantize(colors=30)
    return [
        ("png_rgb", encoded(rgb, "PNG")),
        ("png_rgba", encoded(rgba, "PNG")),
        ("png_gray", encoded(rgb.convert("L"), "PNG")),
        ("png_gray_alpha", encoded(rgba.convert("LA"), "PNG")),
        ("png_1bit", encoded(rgb.convert("1"), "PNG")),
        ("png_palette_transparency", encoded(palette, "PNG", transparency=3)),
        ("jpeg_baseline", encoded(rgb, "JPEG", quality=90)),
        ("jpeg_444", encoded(rgb, "JPEG", quality=95, subsampling=0)),
        ("jpeg_progressive", encoded(rgb, "JPEG", quality=80, progressive=True)),
        ("jpeg_gray", encoded(rgb.convert("L"), "JPEG", quality=90)),
        ("jpeg_cmyk", encoded(cmyk, "JPEG", quality=90)),
    ] + [(f"jpeg_exif_orientation_{o}", with_orientation(rgb, o)) for o in range(2, 9)] + [
        ("webp_lossy", encoded(rgb, "WEBP", quality=80)),
        ("webp_lossless_alpha", encoded(rgba, "WEBP", lossless=True)),
        ("gif_transparency", encoded(palette, "GIF", transparency=3)),
        ("gif_animation", encoded(palette.convert("RGB").quantize(colors=40), "GIF", save_all=True,
                                  append_images=[frame2], duration=100, loop=0)),
    ]


def test_image(rng, width, height):
    """Gradients under strong noise: smooth regions and every level of rounding."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255.0 / max(width - 1, 1), y * 255.0 / max(height - 1, 1),
                     (x + y) * 127.0 / max(width + height - 2, 1)], axis=-1)
    noise = rng.integers(-60, 61, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def main():
    parser = generator_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--cases", choices=["all", "resize", "preprocess", "codecs"], default="all",
                        help="which cases to write (each test binary needs one kind)")
    args = parser.parse_args()
    seed_everything(args.seed)
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    tensors, resize_meta, preprocess_meta = {}, [], []
    resize_cases = RESIZE_CASES if args.cases in ("all", "resize") else []
    preprocess_cases = PREPROCESS_CASES if args.cases in ("all", "preprocess") else []
    for name, (w, h), (ow, oh), filt in resize_cases:
        image = test_image(rng, w, h)
        tensors[f"resize.{name}.input"] = torch.from_numpy(image)
        tensors[f"resize.{name}.output"] = torch.from_numpy(pil_resize(image, oh, ow, FILTERS[filt]))
        resize_meta.append({"name": name, "width": ow, "height": oh, "filter": FILTERS[filt]})
    for name, cfg, (w, h), max_side, max_tiles, frame in preprocess_cases:
        image = test_image(rng, w, h)
        values, rows, cols = preprocess(image, cfg, max_side=max_side, max_tiles=max_tiles, frame=frame)
        tensors[f"preprocess.{name}.input"] = torch.from_numpy(image)
        tensors[f"preprocess.{name}.pixel_values"] = torch.from_numpy(values)
        preprocess_meta.append({"name": name, "config": cfg, "max_side": max_side, "max_tiles": max_tiles,
                                "frame": frame, "rows": rows, "cols": cols, "num_views": int(values.shape[0])})
    codec_meta = []
    if args.cases in ("all", "codecs"):
        for name, data in codec_files(rng):
            tensors[f"codec.{name}.file"] = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())
            tensors[f"codec.{name}.rgb"] = torch.from_numpy(pil_decode_rgb(data))
            codec_meta.append(name)
    save_file(tensors, os.path.join(args.out, "cases.safetensors"),
              metadata={"resize_cases": json.dumps(resize_meta), "preprocess_cases": json.dumps(preprocess_meta),
                        "codec_cases": json.dumps(codec_meta)})


if __name__ == "__main__":
    main()
