"""A small WordPiece tokenizer trained by the project (no hub download), saved as a standard `tokenizer.json`
that `transformers.AutoTokenizer` loads back. Used by the demo detector and by tests that need real text."""

from __future__ import annotations

from typing import Iterable

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, fixed: configs refer to them


def _pipeline(tok):
    """The text pipeline around a WordPiece model: normalizer, pre-tokenizer (set before training: it shapes what
    is learned), [CLS]/[SEP] template, decoder."""
    from tokenizers import normalizers, pre_tokenizers

    # NFKC keeps Japanese/Korean text intact; no lowercasing so "AI" and "ai" stay distinguishable.
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def _wrap(tok):
    from tokenizers import decoders, processors
    from transformers import PreTrainedTokenizerFast

    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"],
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    """A WordPiece tokenizer learned from `texts`. Note: the `tokenizers` trainer breaks ties between equally
    frequent merges in hash-map order, so two runs on the same texts can number (and choose) tokens differently."""
    from tokenizers import Tokenizer, models, trainers

    tok = _pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]")))
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=1, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok)


def wordpiece_tokenizer(vocab: dict[str, int]):
    """The same pipeline around a given vocabulary ({token: id}, SPECIALS included): the same ids on every run."""
    from tokenizers import Tokenizer, models

    missing = [s for s in SPECIALS if s not in vocab]
    if missing:
        raise ValueError(f"the vocabulary lacks the special tokens {missing}")
    return _wrap(_pipeline(Tokenizer(models.WordPiece(vocab=dict(vocab), unk_token="[UNK]"))))
