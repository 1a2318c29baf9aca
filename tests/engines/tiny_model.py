"""Build a tiny random-weight Llama and a locally trained tokenizer (no hub downloads).

    python tests/engines/tiny_model.py OUT_DIR

Real engines on a CPU (vLLM's CPU build, Dynamo's mocker for its tokenizer) need a model
directory in Hugging Face layout. This one is made from nothing: a byte-level BPE trained
on generated words, a chat template, and a 2-layer Llama with head_dim 64 (vLLM's CPU
attention needs head_dim >= 64). Run it with a Python that has torch and transformers
(the vLLM venv). Rebuilt only when OUT_DIR lacks a complete model of this recipe.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

RECIPE = "tiny-llama-v1"
VOCAB = 2048
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus(n: int = 4000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "zu", "ba", "de", "fi", "go", "hu"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(600)]
    words += "the a of to and in is it that for on with as was be at by this".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) for _ in range(n)]


def build(out: Path) -> None:
    stamp = out / "llmslo-recipe.txt"
    need = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    if stamp.exists() and stamp.read_text() == RECIPE and all((out / f).exists() for f in need):
        print(f"tiny model in {out} is up to date")
        return
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("<pad>"),
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id})
    )
    stamp.write_text(RECIPE)
    print(f"tiny model written to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    build(Path(sys.argv[1]))
