"""Adapters: per-architecture fixes that make a detector static-graph safe. One registry, keyed by HF `model_type`.

What blocks ModernBERT on AOT compilers is not the architecture but three run-time features:
  * the FlashAttention-2 kernel (CUDA-only)            -> force `attn_implementation="sdpa"`;
  * `torch.compile` inside `forward` (`reference_compile`, transformers 4.x) -> turn it off;
  * unpadding and data-dependent mask shortcuts        -> keep the padded path and build the masks ourselves,
    inside the graph, from the 2-D padding mask, so every shape is fixed and no branch depends on data.

Masks: every query row may always see itself (the diagonal is OR-ed in). Padding rows under a sliding window
otherwise see no key at all; PyTorch SDPA returns zeros for such rows, OpenVINO's fused attention returns NaN,
which then spreads into real tokens. Real-token rows already see themselves, so their outputs are unchanged
(proven by the tests: max|diff| = 0.0 against the unmodified HF model).
"""

from __future__ import annotations

import copy
import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from ..errors import ConfigError, UnsupportedArchitecture
from ..models.custom import logits_of
from ..models.detector import Detector
from ..registry import Registry
from . import banded


@dataclass
class AdapterReport:
    """What the adapter did, in words, for the manifest and report.md."""

    adapter: str
    transformers_version: str
    actions: list[str] = field(default_factory=list)
    attention: str = "dense"  # "banded": sliding-window layers compute their band only (not bit-exact; see banded)
    embeddings: dict = field(default_factory=dict)  # the word-embedding table's compact form, when used (compact.py)


def padding_masks(attention_mask: torch.Tensor, sliding_window: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) int padding mask -> boolean SDPA masks (B, 1, T, T): (global, sliding-or-None), diagonal OR-ed in."""
    T = attention_mask.shape[1]
    keys = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): which keys are real
    idx = torch.arange(T, device=attention_mask.device)
    diag = (idx[:, None] == idx[None, :])[None, None]  # (1, 1, T, T)
    full = keys | diag
    if sliding_window is None:
        return full, None
    # Same rule as HF's bidirectional sliding window (and ModernBERT 4.x): |q - k| <= local_attention // 2.
    window = ((idx[:, None] - idx[None, :]).abs() <= sliding_window)[None, None]
    return full, (keys & window) | diag


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean SDPA mask -> additive float mask: 0 where a key is visible, the dtype's lowest finite value elsewhere.

    For the ONNX export only (`StaticDetector.additive_masks`): for a boolean mask the exporter's SDPA lowering guards
    every layer's softmax against all-masked rows (IsNaN + Where over the (B, H, T, T) probabilities: 15 % of
    mmBERT-base 1 x 512 on ONNX Runtime, measured). No row is all-masked here (the diagonal is always visible), and an
    additive mask lowers to one Where for the whole model and an Add per layer. Softmax gives exactly 0 to a key at
    the lowest finite value, as to one masked by False (tests: equal to the HF model bit for bit). Other capture
    paths keep the boolean mask: ExecuTorch's Arm quantiser cannot rescale a float mask of -3.4e38, and OpenVINO
    converts the module's SDPA with its boolean mask as is."""
    return torch.where(mask, 0.0, torch.finfo(dtype).min).to(dtype)


def _additive(backbone: nn.Module, mask: torch.Tensor) -> torch.Tensor:
    return additive(mask, backbone.get_input_embeddings().weight.dtype)


MasksFn = Callable[..., object]  # (backbone, attention_mask (B,T), additive: bool) -> the backbone's attention_mask


class _MaskForm(nn.Module):
    """The one switch both wrappers share: boolean masks, or additive float ones inside `onnx_masks()` (see
    `additive`)."""

    def __init__(self):
        super().__init__()
        self.additive_masks = False

    @contextmanager
    def onnx_masks(self):
        """The mask form the ONNX export takes (additive float); boolean again afterwards, whatever happens."""
        self.additive_masks = True
        try:
            yield self
        finally:
            self.additive_masks = False


class StaticDetector(_MaskForm):
    """forward(input_ids (B,T) int64, attention_mask (B,T) int64) -> logits (B, num_labels); nothing else goes in.
    Wraps a Detector or a stock HFClassifier (same interface)."""

    def __init__(self, detector: Detector, masks: MasksFn):
        super().__init__()
        self.detector = detector
        self._masks = masks

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = self.detector.extra_inputs(input_ids, attention_mask)  # e.g. BERT's segment ids, built in-graph
        bb = self.detector.backbone
        hidden = bb(input_ids=input_ids, attention_mask=self._masks(bb, attention_mask, self.additive_masks),
                    **extra).last_hidden_state  # (B, T, C)
        return self.detector.pool_and_head(hidden, attention_mask)


class _MaskHook:
    """Forward pre-hook on a user module's (copied) backbone: the 2-D padding mask the user's code passes in, the
    adapter's static masks out. A hook, not a replaced `forward`: it takes the module it runs on, so a deep copy of
    the wrapper (a precision cast) hooks its own backbone, not this one."""

    def __init__(self, masks: MasksFn, owner: str):
        self.masks, self.owner = masks, owner

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        positional = "attention_mask" not in kwargs and len(args) > 1  # backbone(input_ids, attention_mask)
        mask = args[1] if positional else kwargs.get("attention_mask")
        if mask is None or mask.dim() != 2:
            raise ConfigError(f"{self.owner} calls its backbone without a 2-D attention_mask (B, T): npuport builds "
                              "the static masks from it; pass it as backbone(input_ids, attention_mask=mask)")
        static = self.masks(module, mask, module.npuport_additive_masks)
        if positional:
            return (args[0], static, *args[2:]), kwargs
        return args, {**kwargs, "attention_mask": static}


class StaticModule(_MaskForm):
    """A user's own module (models/custom.py), its forward exactly as written, on a copy whose backbone is adapted
    and hooked to build the static masks from the 2-D padding mask it is handed. Pooling and heads around the
    backbone (attention pooling, CLS, several heads) are the user's code and run as they are."""

    def __init__(self, model, attention: str):
        super().__init__()
        # Only the copy is held (no reference to the source model: a precision cast deep-copies this wrapper).
        self.module = copy.deepcopy(model.user).eval()  # the user's object stays untouched: it is the proof's reference
        self.backbone_path, self.owner = model.backbone_path, type(model.user).__name__
        bb = self.module.get_submodule(model.backbone_path)
        masks, self.report = ADAPTERS.get(model.model_type)(bb, attention=attention)
        self.report.actions.insert(0, f"module: {model.spec.head.removeprefix('module:')} as written; its backbone "
                                      f"`{model.backbone_path}` adapted in place on a copy")
        bb.npuport_additive_masks = False
        bb.register_forward_pre_hook(_MaskHook(masks, self.owner), with_kwargs=True)

    @contextmanager
    def onnx_masks(self):
        bb = self.module.get_submodule(self.backbone_path)
        bb.npuport_additive_masks = True
        try:
            yield self
        finally:
            bb.npuport_additive_masks = False

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return logits_of(self.module(input_ids, attention_mask), self.owner)


AdapterFn = Callable[..., tuple[MasksFn, AdapterReport]]  # (backbone, *, attention) -> (masks, report)
ADAPTERS: Registry[AdapterFn] = Registry("adapter")


def _force_sdpa(backbone: nn.Module, report: AdapterReport) -> None:
    before = getattr(backbone.config, "_attn_implementation", None)
    if before != "sdpa":
        if hasattr(backbone, "set_attn_implementation"):
            backbone.set_attn_implementation("sdpa")
        else:  # transformers 4.x
            backbone.config._attn_implementation = "sdpa"
        report.actions.append(f"attn_implementation: {before} -> sdpa (FlashAttention-2 is CUDA-only)")
    else:
        report.actions.append("attn_implementation: sdpa (already)")


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def adapt_modernbert(bb: nn.Module, *, attention: str = "dense") -> tuple[MasksFn, AdapterReport]:
    report = AdapterReport(adapter="modernbert", transformers_version=_tf_version())
    _force_sdpa(bb, report)
    cfg = bb.config
    if hasattr(cfg, "reference_compile"):  # transformers 4.x: torch.compile inside forward
        was = cfg.reference_compile
        cfg.reference_compile = False
        for mod in bb.modules():
            if hasattr(mod, "compiled_embeddings"):
                mod.compiled_embeddings = None
        report.actions.append(f"reference_compile: {was} -> False (no torch.compile inside forward)")
    else:
        report.actions.append(f"reference_compile: absent in transformers {report.transformers_version}, nothing to turn off")
    params = inspect.signature(bb.forward).parameters
    window = cfg.local_attention // 2
    if "sliding_window_mask" in params:
        # transformers 4.x: unpadding happens only under flash_attention_2, which we just turned off; the model
        # builds its global and sliding masks from the 2-D mask with finite minima, so no row is empty.
        report.actions.append("unpadding: off (padded SDPA path, fixed shapes)")
        report.actions.append("masks: built in-graph by ModernBertModel._update_attention_mask from the 2-D mask")

        def masks(backbone, attention_mask, additive=False):  # 4.x builds float masks itself
            return attention_mask

    else:
        # transformers 5.x: no unpadding path; masks come from masking_utils, which returns None for unpadded
        # input (a data-dependent shortcut a trace would freeze). We pass the per-layer-type masks ourselves.
        report.actions.append(f"unpadding: absent in transformers {report.transformers_version} (always padded)")
        report.actions.append(
            f"masks: global + sliding-window (|q-k| <= {window}) built in-graph from the 2-D mask, diagonal OR-ed in "
            "(boolean; additive float in the ONNX export: no per-layer NaN guard in its attention)"
        )

        band = attention == "banded"
        if band:
            _banded_attention(bb, window, report)

        def masks(backbone, attention_mask, additive=False):
            full, sliding = padding_masks(attention_mask, window)
            if band and banded.applies(attention_mask.shape[1], window):
                sliding = banded.banded_mask(attention_mask, window)  # (B, 1, T/w, w, 3w) instead of (B, 1, T, T)
            if additive:
                full, sliding = _additive(backbone, full), _additive(backbone, sliding)
            return {"full_attention": full, "sliding_attention": sliding}

    report.actions.append("inputs: input_ids + attention_mask only (int64, fixed shape)")
    return masks, report


def _banded_attention(bb: nn.Module, window: int, report: AdapterReport) -> None:
    report.attention = "banded"
    banded.register()
    bb.set_attn_implementation(banded.IMPLEMENTATION)
    report.actions.append(
        f"attention: banded for sliding-window layers at lengths > {3 * window} (blocks of {window} tokens, each "
        f"attending 3 blocks: T x {3 * window} scores instead of T x T; not bit-exact, see the proof), dense SDPA "
        "for global layers and shorter lengths")


def adapt_bert_family(bb: nn.Module, *, attention: str = "dense") -> tuple[MasksFn, AdapterReport]:
    """BERT, RoBERTa, XLM-RoBERTa, DistilBERT: SDPA and a prepared 4-D mask (no data-dependent mask skipping)."""
    report = AdapterReport(adapter="bert-family", transformers_version=_tf_version())
    _force_sdpa(bb, report)
    report.actions.append("masks: (B,1,T,T) built in-graph from the 2-D mask, diagonal OR-ed in (boolean; "
                          "additive float in the ONNX export: no per-layer NaN guard in its attention)")

    def masks(backbone, attention_mask, additive=False):
        full, _ = padding_masks(attention_mask)
        return _additive(backbone, full) if additive else full

    report.actions.append("inputs: input_ids + attention_mask only (int64, fixed shape)")
    return masks, report


ADAPTERS.register("modernbert", adapt_modernbert)
for _mt in ("bert", "roberta", "xlm-roberta", "distilbert"):
    ADAPTERS.register(_mt, adapt_bert_family)


def check_attention(detector: Detector, attention: str, buckets: tuple[int, ...]) -> None:
    """Port-time validation of `--attention` against the model and the compiled lengths (nothing written yet)."""
    if attention == "banded":
        cfg = detector.backbone.config
        window = cfg.local_attention // 2 if hasattr(cfg, "local_attention") else None
        banded.check(detector.model_type, getattr(cfg, "layer_types", None), window, buckets, _tf_version())


def adapt(detector, attention: str = "dense") -> tuple[StaticDetector | StaticModule, AdapterReport]:
    """`attention`: "dense" (exact: adapted == HF bit for bit) or "banded" (sliding-window layers only; see banded).
    A Detector or stock classifier becomes a StaticDetector; a user's own module (models/custom.py) a StaticModule
    whose copied backbone is patched in place."""
    if attention not in banded.ATTENTION_FORMS:
        raise ConfigError(f"--attention {attention!r}: choose one of {', '.join(banded.ATTENTION_FORMS)}")
    model_type = detector.model_type
    if model_type not in ADAPTERS:
        raise UnsupportedArchitecture(
            f"no adapter for model_type {model_type!r}; supported: {', '.join(ADAPTERS.names())}"
        )
    check_attention(detector, attention, ())  # the model; the compiled lengths are checked when a port starts
    if getattr(detector, "user", None) is not None:  # a user's module: adapt a copy of its backbone in place
        static = StaticModule(detector, attention)
        return static, static.report
    masks, report = ADAPTERS.get(model_type)(detector.backbone, attention=attention)
    return StaticDetector(detector.eval(), masks), report
