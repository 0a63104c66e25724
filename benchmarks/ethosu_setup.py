"""The Ethos-U diagnostics' shared setup (ethosu_fakequant.py, ethosu_localise.py): the demo detector captured at
one shape as `port` captures it, with the rows `npu_mixed.py` calibrates on (64 validation rows) and judges on
(test + test_family rows, half each); or, with --pick, chosen lines of the splits (the rows a verify run flipped), and
with --calibration port, the validation rows `npuport port --calibration-data val.jsonl` itself calibrates on."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import NamedTuple


class Setup(NamedTuple):
    demo: Path  # the demo build (model/, data/, build.json)
    captured: object  # npuport.static.capture.Captured
    shape: tuple[int, int]
    calib: list  # [(ids, mask)] calibration batches
    rows: list  # [(ids, mask)] eval rows, one per batch


def _rows(path: Path, n: int, seed: int) -> list[str]:
    lines = path.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return lines[:n]


def add_arguments(ap) -> None:
    ap.add_argument("--model-dir", help="a demo build (model/, data/, build.json); default: the demo detector, built "
                    "or reused as npu_mixed.py does")
    ap.add_argument("--device", default="ethos-u55-128")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--pick", help="eval on these 0-based lines of the splits instead of a sample, e.g. "
                    "'test_family:267,356;test:165' (the changed_lines of results/npu_verify.json), or 'test_family:all'")
    ap.add_argument("--calibration", default="sample", choices=("sample", "port"),
                    help="sample: 64 shuffled validation rows (npu_mixed.py's); port: val.jsonl as `port "
                    "--calibration-data` takes it (its first rows, up to the capture's MAX_ROWS)")


def result_name(base: str, a) -> str:
    """Where a run writes its JSON: the default run keeps its name; another length, chosen rows or the port's
    calibration rows each add to it, so that a diagnostic never overwrites the recorded one."""
    return base + (f"_{a.seq_len}" if a.seq_len != 64 else "") + ("_picked" if a.pick else "") + (
        "_portcal" if a.calibration == "port" else "")


def _picked(demo: Path, pick: str) -> list[str]:
    out = []
    for part in filter(None, pick.split(";")):
        split, _, lines = part.partition(":")
        rows = (demo / "data" / f"{split.strip()}.jsonl").read_text().splitlines()
        out += rows if lines.strip() == "all" else [rows[int(i)] for i in lines.split(",") if i.strip()]
    return out


def capture(model_dir: str | None, device: str, seq_len: int, eval_rows: int = 60, prefix: str = "npuport-eu-",
            pick: str | None = None, calibration: str = "sample") -> Setup:
    from npuport import porting
    from npuport.config import ModelSource, PortConfig
    from npuport.runtimes import ShapeSpec
    from npuport.ui import Progress

    if model_dir:
        demo = Path(model_dir)
    else:
        from npuport.detector.demo import DemoBuildConfig, build_demo

        demo = build_demo(DemoBuildConfig(), Progress(enabled=True), show_bar=False)
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    evalf, calibf = tmp / "eval.jsonl", tmp / "calib.jsonl"
    half = eval_rows // 2
    evalf.write_text("\n".join(_picked(demo, pick) if pick else _rows(demo / "data" / "test.jsonl", half, 0)
                               + _rows(demo / "data" / "test_family.jsonl", eval_rows - half, 0)) + "\n")
    val = demo / "data" / "val.jsonl"
    calibf.write_text(val.read_text() if calibration == "port" else "\n".join(_rows(val, 64, 1)) + "\n")
    cfg = PortConfig(source=ModelSource(model_dir=str(demo / "model")), out=str(tmp / "o"), runtimes=("ethos-u",),
                     shapes=ShapeSpec(batch_sizes=(1,), buckets=(seq_len,)), eval_data=str(evalf),
                     calibration_data=str(calibf), precision="int8", device=device, capture_methods=("export",))
    inputs = porting.load_inputs(cfg, print)
    captured, _ = porting.capture_and_prove(inputs, inputs.cfg, tmp / "capture", print)
    shape = (1, seq_len)
    return Setup(demo, captured, shape, captured.calibration_batches(shape, inputs.specs["ethos-u"].calibration),
                 captured.calibration_batches(shape, inputs.eval_rows))
