"""Quantization-aware training's ranges, as a runtime stores and reuses them (PT2E fake-quant modules).

A QAT run (`npuport detector train --qat TARGET`) trains the detector through the target's own quantizer
(`Runtime.prepare_qat`: a PT2E graph with fake-quant modules on every quantised edge): the activation ranges are
calibrated first, as `port` would, and held; the weights train under them, and the weights' fake-quants follow the
weights. It keeps what every fake-quant module then holds: scale, zero point and observer range. `port` rebuilds the
same graph at each shape, loads them, freezes them and converts: no calibration, the integer graph computes what the
trained fake-quant graph computed.

The ranges are keyed by batch size. At one batch size, every bucket's graph has the same fake-quant modules in the
same order (torch.export names them in graph order), so the ranges carry from the training length to every bucket;
batch 1 specialises some views, so its graph has other modules, which `carry` aligns with the training graph's. A
signature (the op each module observes, in order) is stored beside them and checked before loading: a graph that
does not match is refused, never loaded by position.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from ..errors import ArtifactError, ConfigError, IntegrityError

INFO_FILE = "qat.json"
RANGES_FILE = "qat_ranges.safetensors"
PREFIX = "activation_post_process_"


def modules(prepared) -> list:
    """The graph's fake-quant (or observer) nodes, in graph order."""
    return [n for n in prepared.graph.nodes if n.op == "call_module" and str(n.target).startswith(PREFIX)]


def is_weight(node) -> bool:
    """A fake-quant on a weight (a constant of the graph), as opposed to an activation."""
    return getattr(node.args[0], "op", None) == "get_attr"


def signature(prepared) -> str:
    """sha256 of the ops the fake-quant modules observe, in graph order: equal graphs, equal ranges layout."""
    ops = [f"{n.target}:{getattr(n.args[0], 'target', n.args[0])}" for n in modules(prepared)]
    return hashlib.sha256("\n".join(map(str, ops)).encode()).hexdigest()


_VIEWS = {"aten.view.default", "aten._unsafe_view.default", "aten.clone.default", "aten.reshape.default"}


def _observed(prepared, node) -> str:
    """What a fake-quant module observes and its integer span; other fake-quant modules' numbering left out (it
    shifts between two graphs that differ by a module)."""
    src = str(getattr(node.args[0], "target", node.args[0]))
    m = getattr(prepared, node.target)
    span = getattr(getattr(m, "activation_post_process", m), "quant_max", None)
    return f"{'fake-quant' if src.startswith(PREFIX) else src}@{span}"


def _views_only(keys: list[str]) -> bool:
    """A block of modules on views only, all at one integer span."""
    ops, spans = zip(*(k.rsplit("@", 1) for k in keys), strict=True)
    return set(ops) <= _VIEWS and len(set(spans)) == 1


def carry(target, source) -> int | None:
    """Give `target`'s fake-quant modules the state (ranges) of `source`'s, module by module; returns how many, or
    None (nothing changed) when the two graphs differ by more than views. Why: a batch-1 graph specialises some
    views (where batch 16 has clone + _unsafe_view, batch 1 has one view), so its modules are not the training
    graph's one for one; but a view observes the same values as the clone/_unsafe_view pair it replaces, so the
    graphs align, and batch 1 takes the ranges QAT trained with instead of a calibration of its own (measured on the
    me5-small detector at int8: recalibrated batch-1 ranges kept 76.7 % of unseen decisions where the trained
    ranges keep the training graph's 81.7 %)."""
    import difflib

    a, b = modules(target), modules(source)
    ka, kb = [_observed(target, n) for n in a], [_observed(source, n) for n in b]
    pairs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=ka, b=kb, autojunk=False).get_opcodes():
        if tag == "equal":
            pairs += zip(range(i1, i2), range(j1, j2))
        elif tag == "replace" and _views_only(ka[i1:i2] + kb[j1:j2]):
            pairs += [(i, j2 - 1) for i in range(i1, i2)]  # the views' output: the values the source's last one saw
        else:
            return None
    new = {f"{a[i].target}.{k}": v.detach().clone() for i, j in pairs
           for k, v in getattr(source, b[j].target).state_dict().items()}
    if set(state(target)) - set(new):
        return None
    target.load_state_dict(new, strict=False)
    return len(pairs)


def state(prepared) -> dict:
    """The fake-quant modules' buffers (scales, zero points, observer ranges); never the weights."""
    return {k: v.detach().clone().contiguous() for k, v in prepared.state_dict().items() if k.startswith(PREFIX)}


def freeze(prepared) -> None:
    """Eval mode with every observer off: the graph now computes with the ranges it holds."""
    from torchao.quantization.pt2e import disable_observer, move_exported_model_to_eval

    move_exported_model_to_eval(prepared)
    prepared.apply(disable_observer)


@functools.cache
def _held_classes() -> tuple[type, type]:
    """The two fake-quant classes hold() gives a QAT graph. Built on first use (torchao is imported lazily)."""
    import torch
    from torchao.quantization.pt2e import DerivedObserverOrFakeQuantize
    from torchao.quantization.pt2e.fake_quantize import FusedMovingAvgObsFakeQuantize

    class HeldFakeQuantize(FusedMovingAvgObsFakeQuantize):
        """Observer off: rounds with calculate_qparams, as convert_pt2e does."""

        def forward(self, X):
            if self.observer_enabled[0] == 1 or self.fake_quant_enabled[0] == 0 or self.is_per_channel:
                return super().forward(X)
            scale, zero_point = self.calculate_qparams()
            obs = self.activation_post_process
            return torch.fake_quantize_per_tensor_affine(X, scale.reshape(()).float(),
                                                         zero_point.reshape(()).to(torch.int32), obs.quant_min,
                                                         obs.quant_max)

    class HeldBiasQuantize(DerivedObserverOrFakeQuantize):
        """A bias rounded to its derived int32 step (input scale x weight scale), as convert_pt2e stores it; torch's
        derived observer passes the float bias through. Until the ranges it derives from exist (a first forward),
        the bias passes through."""

        def forward(self, x):
            for o in self.obs_or_fqs:
                low = getattr(getattr(o, "activation_post_process", o), "min_val", None)
                if low is not None and not bool(torch.isfinite(low).all()):
                    return x
            scale, zero_point = self.calculate_qparams()
            if self.ch_axis is not None and scale.numel() > 1:
                return torch.fake_quantize_per_channel_affine(x, scale.float(), zero_point.to(torch.int32),
                                                              self.ch_axis, self.quant_min, self.quant_max)
            return torch.fake_quantize_per_tensor_affine(x, scale.reshape(()).float(),
                                                         zero_point.reshape(()).to(torch.int32), self.quant_min,
                                                         self.quant_max)

    return HeldFakeQuantize, HeldBiasQuantize


def hold(prepared) -> int:
    """Make a PT2E QAT graph's forward, observers off, round every tensor as convert_pt2e will round it in the
    integer graph; returns how many modules it changed (their state, buffers and keys, unchanged). Two places where
    torch's QAT modules and convert_pt2e differ:
      * torch's fused_moving_avg_obs_fake_quant recomputes its qparams from the observer's range on every forward,
        observer on or off, in C++ (choose_qparams: scales below 6.1e-5 raised to it, its own zero-point choice);
        convert_pt2e takes the observer's calculate_qparams, in Python. They differ on some tensors (a LayerNorm's
        mean, and the 1/C it is computed with);
      * a bias is passed through in float by the QAT graph and stored by convert_pt2e as int32 at its derived step.
    Each puts a difference of a fraction of a step on a tensor; an 8-bit graph turns such differences into whole
    steps at the next rounding, and on the me5-small detector at int8 (12 layers) the frozen QAT graph's logits
    differed from its converted graph's by up to 1.9 (2.4 with the first fixed alone). The trained forward is what
    the integer graph must reproduce."""
    import torch
    from torchao.quantization.pt2e import DerivedObserverOrFakeQuantize
    from torchao.quantization.pt2e.fake_quantize import FusedMovingAvgObsFakeQuantize

    held, bias = _held_classes()
    n = 0
    for m in prepared.modules():
        if type(m) is FusedMovingAvgObsFakeQuantize:
            m.__class__ = held
        elif type(m) is DerivedObserverOrFakeQuantize and m.dtype == torch.int32:
            m.__class__ = bias
        else:
            continue
        n += 1
    return n


def thaw(prepared) -> None:
    """The weights' fake-quants observe again (the weights move), the activations' ranges stay held. The graph stays
    in eval mode, dropout off: QAT distils the float detector's answers, computed without dropout, and dropout's
    random masks through 8-bit fake-quants are far larger than the rounding QAT is there to learn (measured on the
    me5-small detector at int8 on the U55: the first step's KL to the float answers 2.06 with dropout, 0.38 without;
    two epochs with dropout left the fake-quantised graph keeping fewer of the float detector's decisions on the
    validation split than before training)."""
    from torchao.quantization.pt2e import move_exported_model_to_eval

    move_exported_model_to_eval(prepared)
    for n in modules(prepared):
        m = getattr(prepared, n.target)
        if is_weight(n) and hasattr(m, "enable_observer"):  # not a bias's derived quantizer: it has no observer
            m.enable_observer()


def trainable(prepared) -> None:
    """Make the fake-quant graph's backward finite, its forward unchanged. A LayerNorm decomposes to rsqrt of the
    (fake-quantised) variance; a token whose variance rounds to 0 gets rsqrt = inf, which the next fake-quant clamps
    to its range (the integer graph's table saturates the same way), but whose gradient is 0 x inf = NaN, and one NaN
    poisons every weight's gradient (measured on the me5-small detector from the first step). rsqrt(max(x, tiny))
    is inf-free with the same clamped forward and a zero gradient there. Only the training graph gets it: `port`
    rebuilds its graph from the model, unchanged."""
    import torch

    for n in list(prepared.graph.nodes):
        if n.op == "call_function" and n.target is torch.ops.aten.rsqrt.default:
            with prepared.graph.inserting_before(n):
                floor = prepared.graph.call_function(torch.ops.aten.clamp_min.default,
                                                     (n.args[0], torch.finfo(torch.float32).tiny))
            n.replace_input_with(n.args[0], floor)
    # Constants the quantizer's constant folding computed from parameters (BERT's token-type row added to every
    # position) keep that computation's autograd history, so a second step would backward through the first one's
    # graph. They are constants of this graph: detached. (They come from the embedding block, which QAT keeps frozen.)
    for mod in prepared.modules():
        for name, buf in list(mod.named_buffers(recurse=False)):
            if buf is not None and buf.grad_fn is not None:
                mod._buffers[name] = buf.detach()
    prepared.recompile()


def save(directory: Path, ranges: dict[int, dict], signatures: dict[int, str]) -> str:
    """qat_ranges.safetensors (`b{batch}.{module}.{buffer}`) written atomically; returns its sha256."""
    from safetensors.torch import save

    from ..fsio import atomic_write

    flat = {f"b{b}.{k}": v for b, st in ranges.items() for k, v in st.items()}
    data = save(flat, metadata={"signatures": json.dumps({str(b): s for b, s in signatures.items()})})
    atomic_write(directory / RANGES_FILE, data)
    return hashlib.sha256(data).hexdigest()


def read_info(model_dir: str | Path) -> dict | None:
    """The QAT record of a model directory, or None when it was not trained with --qat."""
    p = Path(model_dir) / INFO_FILE
    if not p.is_file():
        return None
    try:
        info = json.loads(p.read_text())
        for k in ("target", "device", "precision", "batch_sizes", "ranges_sha256"):
            info[k]
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{p}: not a QAT record npuport wrote ({type(e).__name__}: {e}); re-run the QAT "
                            "training (`npuport detector train`), or remove the file to port with calibration instead") from None
    return info


def check(ranges_file: Path, sha256: str) -> None:
    """The ranges file is the one its qat.json recorded (a changed file is refused, exit 1)."""
    if not ranges_file.is_file():
        raise ArtifactError(f"{ranges_file} is missing (qat.json names it); re-run the QAT training (`npuport detector "
                            "train`)")
    if hashlib.sha256(ranges_file.read_bytes()).hexdigest() != sha256:
        raise IntegrityError(f"{ranges_file}: its sha256 differs from the one qat.json recorded; the ranges were "
                             "changed after training. Re-run the QAT training (`npuport detector train`)")


def load(prepared, ranges_file: Path, batch: int, sha256: str) -> None:
    """Load batch `batch`'s ranges into a freshly prepared graph and freeze it; refuse a changed file or a graph
    whose fake-quant modules differ from the ones trained."""
    from safetensors import safe_open

    check(ranges_file, sha256)
    with safe_open(str(ranges_file), framework="pt") as f:
        signatures = json.loads((f.metadata() or {}).get("signatures", "{}"))
        if str(batch) not in signatures:
            raise ConfigError(f"the QAT ranges hold batch sizes {', '.join(sorted(signatures))}, not {batch}: port with "
                              f"--batch-sizes {','.join(sorted(signatures))}, or train it again with that batch size")
        if signatures[str(batch)] != signature(prepared):
            raise ArtifactError(f"the quantised graph at batch {batch} has other fake-quant modules than the one QAT "
                                "trained (another npuport, ExecuTorch or model version?): re-run the QAT training "
                                "(`npuport detector train`)")
        head = f"b{batch}."
        st = {k[len(head):]: f.get_tensor(k) for k in f.keys() if k.startswith(head)}
    missing = set(state(prepared)) - set(st)
    if missing:
        raise ArtifactError(f"{ranges_file}: {len(missing)} fake-quant buffers missing at batch {batch}; re-run QAT")
    prepared.load_state_dict(st, strict=False)
    freeze(prepared)
