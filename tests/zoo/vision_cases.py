"""Image-processing cases for the vision-ops sweep and zoo: torchvision.transforms.v2
functional transforms on tensors and kornia, each wrapped in a tiny module with fixed
parameters (no random augmentation), on float32 images in [0, 1] or uint8 images.

``all_cases()`` maps a case name to a builder returning ``(module, example)``; a builder
imports its package when called, so a missing kornia fails only its own cases.
Used by ``benchmarks/vision_ops_sweep.py`` and ``tests/zoo/test_vision_ops_zoo.py``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

SHAPE = (2, 3, 32, 32)


class Fn(nn.Module):
    """``forward(*xs) = fn(*xs)``; tensors the function needs are buffers."""

    def __init__(self, fn: Callable, **buffers: torch.Tensor):
        super().__init__()
        self.fn = fn
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, *xs):
        return self.fn(self, *xs)


def float_image(shape=SHAPE, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def uint8_image(shape=SHAPE, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)


def image_like(example: tuple, seed: int) -> tuple:
    """Seeded images typed like ``example``: floats in [0, 1], integers over their range."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in example:
        if t.is_floating_point():
            out.append(torch.rand(t.shape, generator=gen, dtype=t.dtype))
        else:
            high = 256 if t.dtype == torch.uint8 else int(t.max()) + 1
            out.append(torch.randint(int(t.min()), high, t.shape, generator=gen,
                                     dtype=t.dtype))
    return tuple(out)


def with_specials(inputs: tuple) -> tuple:
    """NaN, +inf and -inf at fixed pixels of every floating input (4-D images)."""
    out = []
    for t in inputs:
        if t.is_floating_point() and t.dim() == 4:
            t = t.clone()
            t[0, 0, 1, 2] = float("nan")
            t[0, -1, 5, 7] = float("inf")
            t[-1, 0, 10, 3] = float("-inf")
        out.append(t)
    return tuple(out)


def _case(fn, make=float_image, **buffers):
    return lambda: (Fn(fn, **{k: v() if callable(v) else v for k, v in buffers.items()}),
                    (make(),))


def _pair(fn):
    return lambda: (Fn(fn), (float_image(), float_image(seed=1)))


def torchvision_cases() -> dict:
    from crossport.compat import import_torchvision

    import_torchvision()
    from torchvision.transforms.v2 import InterpolationMode as IM
    from torchvision.transforms.v2 import functional as F

    both = {"f32": float_image, "u8": uint8_image}
    cases = {}

    def add(name, fn, dtypes=("f32", "u8"), **buffers):
        for d in dtypes:
            cases[f"tv.{name}.{d}"] = _case(fn, both[d], **buffers)

    for mode, im in (("bilinear", IM.BILINEAR), ("nearest", IM.NEAREST),
                     ("bicubic", IM.BICUBIC), ("nearest_exact", IM.NEAREST_EXACT)):
        for aa in (True, False):
            add(f"resize_down.{mode}.aa{int(aa)}",
                lambda m, x, im=im, aa=aa: F.resize(x, [20, 24], interpolation=im,
                                                    antialias=aa))
        add(f"resize_up.{mode}", lambda m, x, im=im: F.resize(x, [48, 40], interpolation=im))
    for mode, im in (("bilinear", IM.BILINEAR), ("nearest", IM.NEAREST)):
        add(f"affine.{mode}", lambda m, x, im=im: F.affine(
            x, angle=15.0, translate=[2, 3], scale=1.1, shear=[5.0, 0.0], interpolation=im))
        add(f"rotate.{mode}", lambda m, x, im=im: F.rotate(x, 30.0, interpolation=im))
        add(f"perspective.{mode}", lambda m, x, im=im: F.perspective(
            x, [[0, 0], [31, 0], [31, 31], [0, 31]], [[2, 1], [29, 3], [30, 28], [1, 30]],
            interpolation=im))
    add("rotate_expand", lambda m, x: F.rotate(x, 30.0, expand=True, fill=0.5), ("f32",))
    add("affine_fill", lambda m, x: F.affine(x, angle=-20.0, translate=[0, 0], scale=0.9,
                                             shear=[0.0, 0.0], fill=[0.2, 0.4, 0.6]),
        ("f32",))
    add("elastic", lambda m, x: F.elastic(x, m.disp), ("f32", "u8"),
        disp=lambda: 0.1 * torch.randn(1, 32, 32, 2,
                                       generator=torch.Generator().manual_seed(3)))
    add("gaussian_blur", lambda m, x: F.gaussian_blur(x, [5, 5], [1.5, 1.5]))
    add("gaussian_blur_aniso", lambda m, x: F.gaussian_blur(x, [3, 7], [0.8, 2.0]),
        ("f32",))
    add("adjust_brightness", lambda m, x: F.adjust_brightness(x, 1.3))
    add("adjust_contrast", lambda m, x: F.adjust_contrast(x, 0.7))
    add("adjust_saturation", lambda m, x: F.adjust_saturation(x, 1.5))
    add("adjust_hue", lambda m, x: F.adjust_hue(x, 0.2))
    add("adjust_gamma", lambda m, x: F.adjust_gamma(x, 0.8, gain=1.1))
    add("adjust_sharpness", lambda m, x: F.adjust_sharpness(x, 2.0))
    add("rgb_to_grayscale1", lambda m, x: F.rgb_to_grayscale(x, 1))
    add("rgb_to_grayscale3", lambda m, x: F.rgb_to_grayscale(x, 3))
    add("posterize", lambda m, x: F.posterize(x, 3), ("u8",))
    add("solarize", lambda m, x: F.solarize(x, 0.5), ("f32",))
    add("solarize", lambda m, x: F.solarize(x, 128), ("u8",))
    add("autocontrast", lambda m, x: F.autocontrast(x))
    add("equalize", lambda m, x: F.equalize(x))
    add("invert", lambda m, x: F.invert(x))
    add("normalize", lambda m, x: F.normalize(x, [0.485, 0.456, 0.406],
                                              [0.229, 0.224, 0.225]), ("f32",))
    for mode in ("constant", "edge", "reflect", "symmetric"):
        add(f"pad.{mode}", lambda m, x, mode=mode: F.pad(x, [2, 3, 4, 1], fill=0,
                                                         padding_mode=mode))
    add("center_crop", lambda m, x: F.center_crop(x, [20, 17]))
    add("center_crop_pad", lambda m, x: F.center_crop(x, [40, 36]))
    add("five_crop", lambda m, x: F.five_crop(x, [16, 16]))
    add("ten_crop", lambda m, x: F.ten_crop(x, [16, 16]), ("f32",))
    add("resized_crop", lambda m, x: F.resized_crop(x, 3, 5, 20, 18, [24, 24]))
    add("erase", lambda m, x: F.erase(x, 4, 6, 10, 8, m.v), ("f32",),
        v=lambda: torch.full((3, 10, 8), 0.25))
    add("hflip", lambda m, x: F.horizontal_flip(x))
    add("vflip", lambda m, x: F.vertical_flip(x))
    add("to_dtype_f32", lambda m, x: F.to_dtype(x, torch.float32, scale=True), ("u8",))
    add("to_dtype_u8", lambda m, x: F.to_dtype(x, torch.uint8, scale=True), ("f32",))
    add("convert_image_dtype_u8", lambda m, x: F.convert_image_dtype(x, torch.uint8),
        ("f32",))
    add("convert_image_dtype_f32", lambda m, x: F.convert_image_dtype(x, torch.float32),
        ("u8",))
    add("to_dtype_f32_then_u8", lambda m, x: F.to_dtype(
        F.adjust_contrast(F.to_dtype(x, torch.float32, scale=True), 1.4), torch.uint8,
        scale=True), ("u8",))
    return cases


def kornia_cases() -> dict:
    cases = {}

    def add(name, make_fn, make=float_image, **buffers):
        cases[f"kornia.{name}"] = lambda: (Fn(make_fn(), **{
            k: v() if callable(v) else v for k, v in buffers.items()}), (make(),))

    _color_cases(add)
    _filter_cases(add)
    _enhance_cases(add)
    _geometry_cases(add)
    _morphology_cases(add)
    _feature_cases(add)

    def metric(name, make_fn):
        cases[f"kornia.{name}"] = lambda: (Fn(make_fn()), (float_image(), float_image(seed=1)))

    import kornia

    metric("ssim", lambda: lambda m, a, b: kornia.metrics.ssim(a, b, 5))
    metric("psnr", lambda: lambda m, a, b: kornia.metrics.psnr(a, b, 1.0))
    metric("ssim_loss", lambda: lambda m, a, b: kornia.losses.ssim_loss(a, b, 5))
    metric("psnr_loss", lambda: lambda m, a, b: kornia.losses.psnr_loss(a, b, 1.0))
    metric("total_variation", lambda: lambda m, a, b: kornia.losses.total_variation(a - b))
    return cases


def _color_cases(add):
    import kornia.color as C

    for fwd, back in (("hsv", "hsv"), ("hls", "hls"), ("lab", "lab"), ("luv", "luv"),
                      ("yuv", "yuv"), ("ycbcr", "ycbcr"), ("xyz", "xyz"),
                      ("linear_rgb", "linear_rgb")):
        to = getattr(C, f"rgb_to_{fwd}")
        frm = getattr(C, f"{back}_to_rgb")
        add(f"color.rgb_to_{fwd}", lambda to=to: lambda m, x: to(x))
        add(f"color.{fwd}_roundtrip", lambda to=to, frm=frm: lambda m, x: frm(to(x)))
    add("color.rgb_to_grayscale", lambda: lambda m, x: C.rgb_to_grayscale(x))
    add("color.bgr_to_rgb", lambda: lambda m, x: C.bgr_to_rgb(x))
    add("color.rgb_to_rgba", lambda: lambda m, x: C.rgb_to_rgba(x, 1.0))
    add("color.hsv_to_rgb", lambda: lambda m, x: C.hsv_to_rgb(
        x * torch.tensor([2 * math.pi, 1.0, 1.0]).view(1, 3, 1, 1)))


def _filter_cases(add):
    import kornia.filters as Fl

    add("filters.GaussianBlur2d", lambda: _mod(Fl.GaussianBlur2d((5, 5), (1.5, 1.5))))
    add("filters.GaussianBlur2d_reflect",
        lambda: _mod(Fl.GaussianBlur2d((3, 5), (1.0, 2.0), border_type="reflect")))
    add("filters.BoxBlur", lambda: _mod(Fl.BoxBlur((3, 3))))
    add("filters.MedianBlur", lambda: _mod(Fl.MedianBlur((3, 3))))
    add("filters.Sobel", lambda: _mod(Fl.Sobel()))
    add("filters.Sobel_unnormalized", lambda: _mod(Fl.Sobel(normalized=False)))
    add("filters.SpatialGradient", lambda: _mod(Fl.SpatialGradient()))
    add("filters.Laplacian", lambda: _mod(Fl.Laplacian(3)))
    add("filters.Canny", lambda: _mod(Fl.Canny()))
    add("filters.UnsharpMask", lambda: _mod(Fl.UnsharpMask((5, 5), (1.5, 1.5))))
    add("filters.BilateralBlur", lambda: _mod(Fl.BilateralBlur((5, 5), 0.1, (1.5, 1.5))))
    add("filters.MotionBlur", lambda: _mod(Fl.MotionBlur(5, 35.0, 0.5)))
    add("filters.blur_pool2d", lambda: lambda m, x: Fl.blur_pool2d(x, 3))
    add("filters.max_blur_pool2d", lambda: lambda m, x: Fl.max_blur_pool2d(x, 3))
    add("filters.filter2d", lambda: lambda m, x: Fl.filter2d(x, m.k, "replicate"),
        k=lambda: torch.randn(1, 3, 3, generator=torch.Generator().manual_seed(5)))


def _mod(module):
    return lambda m, x, module=module: module(x)


def _enhance_cases(add):
    import kornia.enhance as E

    add("enhance.adjust_brightness", lambda: lambda m, x: E.adjust_brightness(x, 0.2))
    add("enhance.adjust_contrast", lambda: lambda m, x: E.adjust_contrast(x, 1.3))
    add("enhance.adjust_saturation", lambda: lambda m, x: E.adjust_saturation(x, 1.5))
    add("enhance.adjust_hue", lambda: lambda m, x: E.adjust_hue(x, 0.5))
    add("enhance.adjust_gamma", lambda: lambda m, x: E.adjust_gamma(x, 0.8, 1.1))
    add("enhance.adjust_log", lambda: lambda m, x: E.adjust_log(x, 1.2))
    add("enhance.adjust_sigmoid", lambda: lambda m, x: E.adjust_sigmoid(x, 0.5, 10))
    add("enhance.equalize", lambda: lambda m, x: E.equalize(x))
    add("enhance.equalize_clahe", lambda: lambda m, x: E.equalize_clahe(x, 40.0, (4, 4)))
    add("enhance.normalize", lambda: _mod(E.Normalize(torch.tensor([0.5, 0.4, 0.3]),
                                                      torch.tensor([0.2, 0.25, 0.3]))))
    add("enhance.denormalize", lambda: _mod(E.Denormalize(torch.tensor([0.5, 0.4, 0.3]),
                                                          torch.tensor([0.2, 0.25, 0.3]))))
    add("enhance.normalize_min_max", lambda: lambda m, x: E.normalize_min_max(x))
    add("enhance.sharpness", lambda: lambda m, x: E.sharpness(x, 0.5))
    add("enhance.posterize", lambda: lambda m, x: E.posterize(x, 3))
    add("enhance.solarize", lambda: lambda m, x: E.solarize(x, 0.5))
    add("enhance.invert", lambda: lambda m, x: E.invert(x))
    add("enhance.zca_whiten_apply", lambda: lambda m, x: E.linear_transform(
        x.flatten(1), m.t, m.mu), t=lambda: torch.eye(3072) * 0.5,
        mu=lambda: torch.full((1, 3072), 0.5))


def _geometry_cases(add):
    import kornia.geometry.transform as T

    affine = torch.tensor([[[0.9, -0.2, 3.0], [0.25, 1.05, -2.0]]]).repeat(2, 1, 1)
    homography = torch.tensor([[[1.0, 0.1, 2.0], [-0.05, 0.95, 1.0], [0.002, -0.001, 1.0]]])
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            add(f"geometry.warp_affine.{mode}.{pad}",
                lambda mode=mode, pad=pad: lambda m, x: T.warp_affine(
                    x, m.a, (28, 30), mode=mode, padding_mode=pad), a=affine)
        add(f"geometry.warp_perspective.{mode}",
            lambda mode=mode: lambda m, x: T.warp_perspective(
                x, m.h.expand(2, 3, 3), (32, 32), mode=mode), h=homography)
    add("geometry.warp_affine.align", lambda: lambda m, x: T.warp_affine(
        x, m.a, (32, 32), align_corners=False), a=affine)
    add("geometry.rotate", lambda: lambda m, x: T.rotate(x, m.angle), angle=torch.tensor(
        [30.0, -45.0]))
    add("geometry.translate", lambda: lambda m, x: T.translate(x, m.t),
        t=torch.tensor([[2.5, -3.0], [1.0, 4.0]]))
    add("geometry.scale", lambda: lambda m, x: T.scale(x, m.s),
        s=torch.tensor([[1.2, 0.8], [0.7, 0.7]]))
    add("geometry.shear", lambda: lambda m, x: T.shear(x, m.s),
        s=torch.tensor([[0.1, -0.2], [0.0, 0.3]]))
    add("geometry.resize", lambda: lambda m, x: T.resize(x, (20, 24)))
    add("geometry.resize_aa", lambda: lambda m, x: T.resize(x, (12, 10), antialias=True))
    add("geometry.rescale", lambda: lambda m, x: T.rescale(x, 1.5))
    add("geometry.pyrdown", lambda: lambda m, x: T.pyrdown(x))
    add("geometry.pyrup", lambda: lambda m, x: T.pyrup(x))
    add("geometry.build_pyramid", lambda: lambda m, x: T.build_pyramid(x, 3))
    add("geometry.remap", lambda: lambda m, x: T.remap(x, m.mx, m.my, align_corners=True),
        mx=lambda: (torch.arange(32.0).view(1, 1, 32).expand(2, 32, 32)
                    + 3 * torch.sin(torch.arange(32.0) / 4).view(1, 32, 1)),
        my=lambda: (torch.arange(32.0).view(1, 32, 1).expand(2, 32, 32)
                    + 2 * torch.cos(torch.arange(32.0) / 5).view(1, 1, 32)))
    add("geometry.crop_and_resize", lambda: lambda m, x: T.crop_and_resize(
        x, m.boxes, (16, 12)), boxes=torch.tensor(
        [[[2.0, 3.0], [20.0, 3.0], [20.0, 25.0], [2.0, 25.0]],
         [[5.0, 5.0], [30.0, 5.0], [30.0, 15.0], [5.0, 15.0]]]))
    add("geometry.center_crop", lambda: lambda m, x: T.center_crop(x, (20, 16)))
    add("geometry.hflip", lambda: lambda m, x: T.hflip(x))
    add("geometry.vflip", lambda: lambda m, x: T.vflip(x))
    add("geometry.elastic_transform2d", lambda: lambda m, x: T.elastic_transform2d(
        x, m.noise, (7, 7), (4.0, 4.0), (1.0, 1.0)),
        noise=lambda: torch.rand(2, 2, 32, 32, generator=torch.Generator().manual_seed(2))
        * 2 - 1)


def _morphology_cases(add):
    import kornia.morphology as M

    for op in ("dilation", "erosion", "opening", "closing", "gradient", "top_hat",
               "bottom_hat"):
        fn = getattr(M, op)
        add(f"morphology.{op}", lambda fn=fn: lambda m, x: fn(x, m.k), k=torch.ones(3, 3))
    add("morphology.dilation_cross", lambda: lambda m, x: M.dilation(x, m.k),
        k=torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    add("morphology.dilation_unfold", lambda: lambda m, x: M.dilation(x, m.k,
                                                                       engine="unfold"),
        k=torch.ones(3, 5))


def _feature_cases(add):
    import kornia.feature as Ft

    gray = lambda: float_image((2, 1, 32, 32))  # noqa: E731
    add("feature.harris_response", lambda: lambda m, x: Ft.harris_response(x, 0.04),
        make=gray)
    add("feature.gftt_response", lambda: lambda m, x: Ft.gftt_response(x), make=gray)
    add("feature.hessian_response", lambda: lambda m, x: Ft.hessian_response(x), make=gray)
    add("feature.dog_response", lambda: lambda m, x: Ft.dog_response(
        x.unsqueeze(2).expand(2, 1, 3, 32, 32) * torch.tensor([1.0, 0.9, 0.7]).view(
            1, 1, 3, 1, 1)), make=gray)
    add("feature.SIFTDescriptor", lambda: _mod(Ft.SIFTDescriptor(32, 8, 4)),
        make=lambda: float_image((4, 1, 32, 32)))
    add("feature.MKDDescriptor", lambda: _mod(Ft.MKDDescriptor(32, whitening=None)),
        make=lambda: float_image((4, 1, 32, 32)))
    add("feature.HardNet", lambda: _mod(_seeded(Ft.HardNet)),
        make=lambda: float_image((2, 1, 32, 32)))
    add("feature.BlobHessian", lambda: _mod(Ft.BlobHessian()), make=gray)
    add("feature.CornerGFTT", lambda: _mod(Ft.CornerGFTT()), make=gray)


def _seeded(cls):
    torch.manual_seed(0)
    return cls(pretrained=False).eval()


def all_cases() -> dict:
    cases = dict(torchvision_cases())
    try:
        cases.update(kornia_cases())
    except ImportError:
        pass
    return cases
