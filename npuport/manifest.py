"""The artifact manifest as a type: written once by `port`, read in one place (`Manifest.read`).

Schema 2 (`npuport-artifact/2`). A manifest records where the artifact came from (source model sha256, npuport and
runtime versions), what it is (runtime, device, precision, shape spec, what executes where), how it was captured and
the proof that it equals eager (capture proof, parity, latency), and the sha256 of every file in the directory.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from ._version import __version__
from .errors import ArtifactError
from .fsio import write_json_atomic
from .spec import ShapeSpec

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # the Ed25519 signature over the manifest (signing.py); not hashed with the files
FORMAT = "npuport-artifact/2"
SCHEMA = 2


@dataclass(kw_only=True)
class RuntimeInfo:
    name: str
    executes: str  # executes | reference | compile-only: what running this artifact here means
    versions: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # what the runtime's compile() reported (format, provider, ...)
    options: dict = field(default_factory=dict)
    execution_precision: str | None = None  # what the runtime really ran, where it can tell (OpenVINO hints)


@dataclass(kw_only=True)
class Manifest:
    source: dict
    detector: dict
    pad_token_id: int
    runtime: RuntimeInfo
    device: str
    precision: str
    shape_spec: ShapeSpec
    capture: dict  # {"method": onnx|export|torch, "proof": {...}}
    adapter: dict
    inputs: list = field(default_factory=lambda: [{"name": "input_ids", "dtype": "int64"},
                                                  {"name": "attention_mask", "dtype": "int64"}])
    outputs: list = field(default_factory=list)
    compile_seconds: float = 0.0
    parity: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    bucket_plan: dict = field(default_factory=dict)  # --buckets auto: the plan and its padding figures (buckets.py)
    files: dict = field(default_factory=dict)
    format: str = FORMAT
    schema: int = SCHEMA
    npuport_version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return self.shape_spec.shapes()

    @property
    def threshold(self) -> float:
        return float(self.detector["threshold"])

    @property
    def labels(self) -> list[str]:
        return list(self.outputs[0]["labels"]) if self.outputs else []

    @property
    def task(self):
        """What the logits mean (problem type, labels, threshold); `detector` holds the head's spec."""
        from .task import Task

        return Task.from_spec({**self.detector, "labels": self.labels or self.detector.get("labels")})

    def to_json(self) -> dict:
        d = asdict(self)
        d["shape_spec"] = self.shape_spec.to_json()
        d["shapes"] = [list(s) for s in self.shapes]  # derived; for readers of the raw JSON
        return d

    @classmethod
    def from_json(cls, d: dict, where: str = "manifest") -> "Manifest":
        if not isinstance(d, dict):
            raise ArtifactError(f"{where}: expected a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise ArtifactError(f"{where}: format {d.get('format')!r} is not {FORMAT!r} "
                                f"(made by another npuport version: port the model again)")
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - d.keys())
        if missing:
            raise ArtifactError(f"{where} lacks the field(s) {', '.join(missing)}")
        kw = {k: v for k, v in d.items() if k in names}
        try:
            kw["runtime"] = RuntimeInfo(**d["runtime"])
            kw["shape_spec"] = ShapeSpec.from_json(d["shape_spec"])
            return cls(**kw)
        except (TypeError, KeyError, ValueError) as e:
            raise ArtifactError(f"{where}: malformed ({type(e).__name__}: {e})") from None

    def write(self, directory: Path) -> None:
        write_json_atomic(Path(directory) / MANIFEST, self.to_json())

    @classmethod
    def read(cls, directory: str | Path) -> "Manifest":
        d = Path(directory)
        path = d / MANIFEST
        if not d.is_dir():
            raise ArtifactError(f"artifact directory {str(d)!r} does not exist")
        if not path.is_file():
            raise ArtifactError(f"{path} is missing: not an npuport artifact (run `npuport port` to make one)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise ArtifactError(f"{path} is not valid JSON: {e}") from None
        return cls.from_json(raw, str(path))
