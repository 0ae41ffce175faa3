"""One ``.tflite`` file of one model from one converter, with its convert/export seconds.

Run by ``tflite_ab.py --models`` with the python of the converter's venv (the project venv
for crossport, ``peer_venvs.py``'s for litert-torch). The first run of a model saves its
torch ``state_dict`` and input; later runs load them, so every converter converts the same
weights. Image models take NHWC input in both converters (crossport ``channels_last_io``,
litert-torch ``to_channel_last_io``); text and audio models take their torch inputs as is.

    .venv/bin/python benchmarks/tflite_files.py --converter crossport --model bert_base \
        --workdir /tmp/ab/bert_base
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets TF/Keras/OpenMP env vars before those libraries load
import torch
from peer_worker import TORCHVISION, build_model, configure_threads, tiny_model

TEXT_TOKENS = 128


class LastHiddenState(torch.nn.Module):
    """HF models return a ModelOutput; both converters get its ``last_hidden_state``."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).last_hidden_state


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    return lambda: build_model(name)


def _timm(name: str) -> Callable[[], torch.nn.Module]:
    def build():
        import timm

        return timm.create_model(name, pretrained=False)
    return build


def _bert():
    from transformers import BertConfig, BertModel

    return LastHiddenState(BertModel(BertConfig(), add_pooling_layer=False))


def _gpt2():
    from transformers import GPT2Config, GPT2Model

    return LastHiddenState(GPT2Model(GPT2Config()))


def _whisper_encoder():
    """Whisper-base's encoder shape (d_model 512, 6 layers) on 30 s of 80 mel bins."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                           encoder_ffn_dim=2048)
    return LastHiddenState(WhisperEncoder(config))


def _image():
    return torch.randn(1, 3, 224, 224)


def _tokens():
    return torch.randint(0, 1000, (1, TEXT_TOKENS))


def _mels():
    return torch.randn(1, 80, 3000)


# name -> (builder, input maker, NHWC io)
MODELS: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor], bool]] = {
    **{name: (_torchvision(name), _image, True) for name in [*TORCHVISION, "densenet121"]},
    **{f"timm_{name}": (_timm(name), _image, True) for name in [
        "mobilenetv3_large_100", "efficientformer_l1", "vit_small_patch16_224",
        "convnextv2_atto"]},
    "bert_base": (_bert, _tokens, False),
    "gpt2_small": (_gpt2, _tokens, False),
    "whisper_encoder": (_whisper_encoder, _mels, False),
}


def model_and_input(name: str, workdir: Path) -> tuple[torch.nn.Module, torch.Tensor, bool]:
    """The seeded module (made live) and input, saved on the first call and re-loaded
    after."""
    build, make_input, channels_last = MODELS[name]
    common.load_torchvision()  # timm and transformers import torchvision
    torch.manual_seed(0)
    module = build().eval()
    state, inputs = workdir / "state.pt", workdir / "input.pt"
    if state.exists():
        module.load_state_dict(torch.load(state, weights_only=True))
        x = torch.load(inputs, weights_only=True)
    else:  # live weights (parity.md): zero-init gains and heads made non-zero, BN calibrated
        x = make_input()
        module = common.calibrate_batchnorm(module, tuple(x.shape))
        torch.save(module.state_dict(), state)
        torch.save(x, inputs)
    return module, x, channels_last


def crossport_file(module, x, channels_last: bool, path: Path, out: dict) -> None:
    import crossport

    warm = crossport.convert_with_report(tiny_model(), (torch.randn(1, 3, 16, 16),),
                                         channels_last_io=True)
    crossport.export(warm, path.with_name("warm.tflite"), overwrite=True)
    out["version"] = crossport.__version__
    start = time.perf_counter()
    conversion = crossport.convert_with_report(module, (x,), channels_last_io=channels_last)
    out["convert_s"] = time.perf_counter() - start
    result = crossport.export(conversion, path, overwrite=True)
    out["export_s"] = result.seconds
    out["export_stages_s"] = result.stages


def litert_torch_file(module, x, channels_last: bool, path: Path, out: dict) -> None:
    import importlib.metadata

    import litert_torch

    nhwc = litert_torch.to_channel_last_io
    litert_torch.convert(nhwc(tiny_model(), args=[0]).eval(),
                         (torch.randn(1, 16, 16, 3),)).export(str(path.with_name("warm.tflite")))
    out["version"] = importlib.metadata.version("litert-torch")
    if channels_last:
        module = nhwc(module, args=[0], outputs=[0] if x.ndim == 4 and _spatial_output(
            module, x) else []).eval()
        x = x.permute(0, 2, 3, 1).contiguous()
    start = time.perf_counter()
    edge = litert_torch.convert(module, (x,))
    out["convert_s"] = time.perf_counter() - start
    start = time.perf_counter()
    edge.export(str(path))
    out["export_s"] = time.perf_counter() - start


def _spatial_output(module, x) -> bool:
    """Whether the output is an NCHW map (segmentation): NHWC out too, as crossport does."""
    with torch.no_grad():
        return module(x).ndim == 4


CONVERTERS = {"crossport": crossport_file, "litert-torch": litert_torch_file}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--converter", choices=list(CONVERTERS), required=True)
    parser.add_argument("--model", choices=list(MODELS), required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    configure_threads()
    args.workdir.mkdir(parents=True, exist_ok=True)
    module, x, channels_last = model_and_input(args.model, args.workdir)
    out: dict = {"converter": args.converter, "model": args.model}
    torch.export.export(tiny_model(), (torch.randn(1, 3, 16, 16),), strict=False)  # warm
    out["torch_export_s"] = common.time_once(
        lambda: torch.export.export(module, (x,), strict=False))
    path = args.workdir / f"{args.converter}.tflite"
    CONVERTERS[args.converter](module, x, channels_last, path, out)
    out["tflite_bytes"] = path.stat().st_size
    (args.workdir / f"{args.converter}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
