"""The tiny models' tokenizers, trained on an inline corpus: WordPiece for BERT, byte-level BPE for Qwen3.

Each writer lays its files out as transformers' own tokenizer classes expect them, so
`AutoTokenizer.from_pretrained(dir)` and vLLM load them unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The pre-tokenizer regex of Qwen2/Qwen3 tokenizers; transformers 5 rebuilds
# Qwen2Tokenizer with exactly this pipeline, so tokenizer.json must match it.
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model can still learn
useful things about words, sentences and documents. Embedding models turn text
into vectors of numbers, so that similar meanings end up close together.
Search engines compare a query with many passages and return the nearest ones.
The weather today is sunny with a light wind from the west, and tomorrow it
may rain in the morning before clearing up in the afternoon.
Cats and dogs are popular pets; many people also keep birds, fish and rabbits.
She opened the window, made a cup of tea and started reading a long novel.
Computers process data with programs written in languages such as Python, C,
Rust and Go. A server answers requests from clients over the network, and a
router decides which worker should handle each request.
The train leaves the station at nine o'clock and arrives in the city at noon.
Mountains, rivers, forests and lakes cover most of the northern region.
Good software is tested, measured and documented; bad software surprises you.
He bought apples, bread, cheese, milk and eggs at the market on Saturday.
Music, painting and dance are arts that people have enjoyed for thousands of
years. The museum shows old maps, coins, tools and letters from the past.
Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 42, 100 and 2024 appear often.
What is the capital of France? Paris is the capital and largest city of France.
How many legs does a spider have? A spider has eight legs and spins a web.
Students learn mathematics, history, science and languages at school.
The doctor said that regular exercise, sleep and healthy food help the body.
Please send me the report by Friday, and let me know if you have questions.
An embedding of a sentence is a point in a space with many dimensions.
Cosine similarity measures the angle between two vectors; a value near one
means the texts are alike, and a value near zero means they are unrelated.
Workers share the load, and metrics show how many requests each one served.
The ocean is deep and blue, the sky is wide and bright, and the night is quiet.
Children played in the park while their parents talked on a wooden bench.
I think, therefore I am. To be or not to be, that is the question.
Hello world! This is a test. Another test follows; it is short and simple.
"""


# ChatML, role by role: without a chat template Dynamo's frontend refuses a model for chat and
# completions alike ("chat_template field is required", measured on 1.6.1), so every stack can
# serve chat only if the tiny models carry one.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _corpus_lines() -> list[str]:
    return [line for line in CORPUS.splitlines() if line.strip()]


def _added_tokens_decoder(tok: Any, tokens: list[str]) -> dict[str, dict[str, Any]]:
    return {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in tokens
    }


def write_bert_tokenizer(d: Path) -> int:
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from tokenizers.trainers import WordPieceTrainer

    # Same pipeline that transformers' BertTokenizer(Fast) builds, so loading
    # through either the class or tokenizer.json gives identical ids.
    tok = Tokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    # The trainer numbers "##c" continuation pieces in hash-map order, which
    # changes from process to process; seeding them as special tokens fixes
    # their ids (and so the merge tie-breaks), then they are demoted again.
    chars: set[str] = set()
    for line in _corpus_lines():
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(line)):
            chars.update(word)
    continuations = [f"##{c}" for c in sorted(chars)]
    trainer = WordPieceTrainer(
        vocab_size=2000,
        min_frequency=1,
        special_tokens=BERT_SPECIALS + continuations,
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_lines(), trainer=trainer)
    raw = json.loads(tok.to_str())
    raw["added_tokens"] = [t for t in raw["added_tokens"] if t["content"] in BERT_SPECIALS]
    tok = Tokenizer.from_str(json.dumps(raw))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.save(str(d / "tokenizer.json"))
    vocab = tok.get_vocab()
    (d / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    write_json(
        d / "tokenizer_config.json",
        {
            "tokenizer_class": "BertTokenizerFast",
            "do_lower_case": True,
            "tokenize_chinese_chars": True,
            "strip_accents": None,
            "unk_token": "[UNK]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "cls_token": "[CLS]",
            "mask_token": "[MASK]",
            "model_max_length": 512,
            "padding_side": "right",
            "clean_up_tokenization_spaces": True,
            "added_tokens_decoder": _added_tokens_decoder(tok, BERT_SPECIALS),
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(
        d / "special_tokens_map.json",
        {
            "unk_token": "[UNK]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "cls_token": "[CLS]",
            "mask_token": "[MASK]",
        },
    )
    return tok.get_vocab_size(with_added_tokens=True)


def write_qwen_tokenizer(d: Path, *, model_max_length: int) -> tuple[int, int]:
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    # Mirrors the Qwen2Tokenizer pipeline (see QWEN_PRETOKENIZE_REGEX).
    tok = Tokenizer(
        BPE(
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=1024,
        min_frequency=1,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_lines(), trainer=trainer)
    eos_id = tok.token_to_id(EOS)
    # Qwen3-Embedding appends <|endoftext|> to every input and pools on it.
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {EOS}:0",
        pair=f"$A:0 {EOS}:0 $B:1 {EOS}:1",
        special_tokens=[(EOS, eos_id)],
    )
    tok.save(str(d / "tokenizer.json"))
    write_json(
        d / "tokenizer_config.json",
        {
            "tokenizer_class": "Qwen2Tokenizer",
            "add_prefix_space": False,
            "bos_token": None,
            "eos_token": EOS,
            "pad_token": EOS,
            "unk_token": None,
            "errors": "replace",
            "model_max_length": model_max_length,
            "padding_side": "left",
            "split_special_tokens": False,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": _added_tokens_decoder(tok, [EOS]),
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json(d / "special_tokens_map.json", {"eos_token": EOS, "pad_token": EOS})
    assert eos_id is not None, "the tokenizer was built with EOS as a special token"
    return tok.get_vocab_size(with_added_tokens=True), eos_id
