"""The named architectures a detector can be built from (`--preset`): configurations only, no torch, so that the
CLI's parser can list them without loading a model library."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..registry import Registry


@dataclass(frozen=True, kw_only=True)
class Preset:
    name: str
    model_type: str
    config: dict = field(default_factory=dict)
    description: str = ""


PRESETS: Registry[Preset] = Registry("preset")


def _preset(name: str, model_type: str, description: str, **config) -> None:
    PRESETS.register(name, Preset(name=name, model_type=model_type, config=config, description=description))


# Published configurations (config.json of jhu-clsp/mmBERT-{base,small} and answerdotai/ModernBERT-base).
_MMBERT = dict(
    vocab_size=256000, intermediate_size=1152, num_hidden_layers=22, max_position_embeddings=8192,
    global_attn_every_n_layers=3, local_attention=128, global_rope_theta=160000.0, local_rope_theta=160000.0,
    norm_eps=1e-5, norm_bias=False, hidden_activation="gelu", pad_token_id=0, bos_token_id=2, eos_token_id=1,
    cls_token_id=2, sep_token_id=1,
)
_preset("mmbert-base", "modernbert", "mmBERT-base (307M, 22 layers, hidden 768, 256k vocab)",
        hidden_size=768, num_attention_heads=12, **_MMBERT)
_preset("mmbert-small", "modernbert", "mmBERT-small (140M, 22 layers, hidden 384, 256k vocab)",
        hidden_size=384, num_attention_heads=6, **_MMBERT)
_preset("modernbert-base", "modernbert", "ModernBERT-base (149M, 22 layers, hidden 768, 50k vocab)",
        vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
        max_position_embeddings=8192, global_attn_every_n_layers=3, local_attention=128,
        global_rope_theta=160000.0, local_rope_theta=10000.0, norm_eps=1e-5, norm_bias=False,
        hidden_activation="gelu", pad_token_id=50283, bos_token_id=50281, eos_token_id=50282,
        cls_token_id=50281, sep_token_id=50282)
# Tiny real-architecture presets for tests: layer 0 global, layers 1-2 sliding with a 16-token window
# (8 each side), shorter than the test sequences, so the sliding-window masks really matter.
_preset("tiny-modernbert", "modernbert", "test size: 3 layers (1 global + 2 sliding, window 16), hidden 64",
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=512, global_attn_every_n_layers=3, local_attention=16,
        global_rope_theta=160000.0, local_rope_theta=10000.0, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, cls_token_id=1, sep_token_id=2)
_preset("tiny-bert", "bert", "test size: BERT, 2 layers, hidden 64", vocab_size=512, hidden_size=64,
        intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
        pad_token_id=0)
_preset("tiny-xlm-roberta", "xlm-roberta", "test size: XLM-RoBERTa, 2 layers, hidden 64", vocab_size=512,
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=514, pad_token_id=1, bos_token_id=0, eos_token_id=2)
_preset("tiny-distilbert", "distilbert", "test size: DistilBERT, 2 layers, dim 64", vocab_size=512, dim=64,
        hidden_dim=128, n_layers=2, n_heads=4, max_position_embeddings=512, pad_token_id=0)


# The demo detector: mmBERT's design at a small size - alternating global / sliding-window attention (every
# third layer global), GeGLU MLP, RoPE - trained by `npuport detector build-demo`. The vocabulary size comes from
# the tokenizer trained with it.
_preset("demo-modernbert", "modernbert", "demo size: 6 layers (2 global + 4 sliding, window 64), hidden 128",
        vocab_size=4096, hidden_size=128, intermediate_size=256, num_hidden_layers=6, num_attention_heads=4,
        max_position_embeddings=1024, global_attn_every_n_layers=3, local_attention=64,
        global_rope_theta=160000.0, local_rope_theta=10000.0, pad_token_id=0, bos_token_id=2, eos_token_id=3,
        cls_token_id=2, sep_token_id=3, embedding_dropout=0.1, attention_dropout=0.1, mlp_dropout=0.1)


# Presets. vkore-46m: the field report gives only "46M, RoPE, SwiGLU, RMSNorm, GQA, char-level"; we chose
# d_model 512, 16 layers, 8 query heads of 64 sharing 2 K/V heads, SwiGLU hidden 1472, untied embeddings,
# which gives 46.8M parameters at a 96-character vocabulary (see tests/test_lm.py::test_preset_sizes).
LM_PRESETS: dict[str, dict] = {  # the decoder LM (models/lm.py)
    "tiny": dict(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64, max_seq_len=64),
    "small": dict(d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, ffn_hidden=704, max_seq_len=256),
    "vkore-46m": dict(d_model=512, n_layers=16, n_heads=8, n_kv_heads=2, ffn_hidden=1472, max_seq_len=512),
}
