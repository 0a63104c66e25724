"""A tokenizer as the files `save_pretrained` writes, kept in memory, with the few ids training reads.

A 250k-piece unigram tokenizer object (multilingual-e5-small's) holds about 0.35 GB; once a job's rows are encoded
(a port's eval rows, a training run's rows) it only has to be written beside the model, so the object is dropped and
these files travel instead.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..fsio import atomic_write


class TokenizerFiles:
    def __init__(self, files: dict[str, bytes], ids: dict[str, int | None], size: int):
        self.files, self.size = files, size
        self.pad_token_id, self.sep_token_id = ids.get("pad_token_id"), ids.get("sep_token_id")
        self.cls_token_id, self.unk_token_id = ids.get("cls_token_id"), ids.get("unk_token_id")

    @classmethod
    def of(cls, tokenizer) -> TokenizerFiles:
        if isinstance(tokenizer, TokenizerFiles):
            return tokenizer
        ids = {k: getattr(tokenizer, k, None) for k in ("pad_token_id", "sep_token_id", "cls_token_id", "unk_token_id")}
        with tempfile.TemporaryDirectory(prefix="npuport-tok-") as d:
            tokenizer.save_pretrained(d)
            files = {p.name: p.read_bytes() for p in Path(d).iterdir() if p.is_file()}
        return cls(files, ids, len(tokenizer))

    def __len__(self) -> int:
        return self.size

    def save_pretrained(self, directory: str) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            atomic_write(out / name, data)
