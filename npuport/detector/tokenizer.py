"""A small WordPiece tokenizer trained by the project (no hub download), saved as a standard `tokenizer.json`
that `transformers.AutoTokenizer` loads back. Used by the demo detector and by tests that need real text."""

from __future__ import annotations

from typing import Iterable

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, fixed: configs refer to them


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # NFKC keeps Japanese/Korean text intact; no lowercasing so "AI" and "ai" stay distinguishable.
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=1, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
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
