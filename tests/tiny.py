"""A tiny Gemma 3 with random weights and a word-level tokenizer, both built in code in a second."""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

WORDS = ("the capital of is paris berlin rome france germany italy a city in country veltoria marnhold "
         "and was founded by made maker new product company chief executive tower located").split()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()  # "Paris" is "paris": a test may write names as names
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers import processors

    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


def tiny_model(vocab_size: int, seed: int = 0) -> Gemma3ForCausalLM:
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=16,
                              max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                              layer_types=["sliding_attention", "full_attention"])
    model = Gemma3ForCausalLM(config).eval()
    model.requires_grad_(False)
    return model


def tiny_loaded():
    """A fresh tiny model and tokenizer as the loader returns them (each call: a new copy, same weights)."""
    from core.model.loader import LoadedModel

    tokenizer = tiny_tokenizer()
    return LoadedModel(tiny_model(len(tokenizer)), tokenizer, torch.device("cpu"), "tiny")
