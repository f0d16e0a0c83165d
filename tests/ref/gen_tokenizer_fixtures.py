#!/usr/bin/env python3
"""Writes tests/ref/tok/<kind>/{tokenizer.json,tokenizer_config.json,cases.json}: tiny
Hugging Face tokenizer.json fixtures of each pre-tokenizer kind zinc reads, and the ids
of test texts computed HERE, independently of zinc's C code (src/data/tok_*.c):

- splitting with the third-party `regex` module (not PCRE2);
- BPE as OpenAI's original encoder.py does it: find the lowest-rank pair, merge every
  occurrence left to right, repeat (zinc merges through a heap of (rank, position));
- byte fallback and Metaspace/Prepend written from the tokenizers documentation.

The merges are learned here from a small corpus (most frequent pair first), so the fixtures
look like real ones. Run: python3 tests/ref/gen_tokenizer_fixtures.py (needs `regex`;
Debian: python3-regex). The output is committed; tests/test_tokenizer.c reads it.
"""
import json
import os
import unicodedata

import regex

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tok")
SP = "\u2581"

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.
I'm sure you'll see that it's the best thing they've done, and we'd agree. DON'T stop!
Numbers: 1234567, 3.14159, 2024 and 42. Call 555-0100 at 10:30.
Unicode: café naïve résumé Ünïcödé, Привет мир, привет, Grüße aus München.
    indented code() {
        return x + y;
    }
Hello world. Hello there, world! hello hello HELLO.
"""

TEXTS = [
    "Hello world! The quick brown fox.",
    "I'm sure you'll see it's DON'T they've we'd YOU'LL",
    "Call 1234567 or 3.14159, year 2024!",
    "a   b\n\n\tc  \n  d   ",
    "café naïve Ünïcödé Привет мир 日本語",
    "smile \U0001F642 ok \u2713 \u00e9t\u00e9",
    "line1\r\nline2\n\n\nline3",
    " leading space and trailing ",
    "    indented code() {\n        return x + y;\n    }",
    "",
    "x",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def learn_merges(words, n_merges):
    """words: list of tuples of symbols; greedy most-frequent pair (ties: first seen)."""
    words = [list(w) for w in words]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: kv[1])[0]
        if counts[best] < 2:
            break
        merges.append(best)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                i += 1
    return merges


def bpe(symbols, ranks):
    """OpenAI encoder.py's bpe(): lowest-rank pair, merge all occurrences, repeat."""
    word = list(symbols)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        out, i = [], 0
        while i < len(word):
            if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = out
    return word


def split_special(text, specials):
    """[(is_special, piece)], longest special first at each position."""
    if not specials:
        return [(False, text)]
    pat = "|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True))
    out, pos = [], 0
    for m in regex.finditer(pat, text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group()))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


class ByteLevelRef:
    def __init__(self, name, split_re, n_merges, specials, ignore_merges=False, nfc=False,
                 bos=None, eos=None, special_base=None):
        self.name, self.split_re, self.ignore_merges, self.nfc = name, split_re, ignore_merges, nfc
        words = [tuple(B2U[b] for b in p.encode()) for p in regex.findall(split_re, CORPUS)]
        self.merges = learn_merges(words, n_merges)
        self.vocab = {}
        for b in range(256):
            self.vocab[B2U[b]] = len(self.vocab)
        for a, b in self.merges:
            if a + b not in self.vocab:
                self.vocab[a + b] = len(self.vocab)
        base = special_base if special_base is not None else len(self.vocab)
        self.specials = {s: base + i for i, s in enumerate(specials)}
        self.bos, self.eos = bos, eos
        self.ranks = {m: i for i, m in enumerate(self.merges)}

    def encode(self, text):
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for special, piece in split_special(text, list(self.specials)):
            if special:
                ids.append(self.specials[piece])
                continue
            for w in regex.findall(self.split_re, piece):
                mapped = "".join(B2U[b] for b in w.encode())
                if self.ignore_merges and mapped in self.vocab:
                    ids.append(self.vocab[mapped])
                    continue
                ids += [self.vocab[s] for s in bpe(mapped, self.ranks)]
        return ids

    def tokenizer_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s, i in self.specials.items()]
        if self.name == "gpt2":
            pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                   "use_regex": True}
        else:
            pre = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": self.split_re}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                 "use_regex": False}]}
        post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                "use_regex": True}
        if self.bos:
            post = {"type": "Sequence", "processors": [post, {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": self.bos, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [], "special_tokens": {}}]}
        model = {"type": "BPE", "dropout": None, "unk_token": None,
                 "continuing_subword_prefix": None, "end_of_word_suffix": None,
                 "fuse_unk": False, "byte_fallback": False, "vocab": self.vocab,
                 "merges": [a + " " + b for a, b in self.merges]}
        if self.ignore_merges:
            model["ignore_merges"] = True
            model["merges"] = [[a, b] for a, b in self.merges]  # the newer pair form
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                "normalizer": {"type": "NFC"} if self.nfc else None, "pre_tokenizer": pre,
                "post_processor": post, "decoder": {"type": "ByteLevel"}, "model": model}

    def config(self):
        c = {"tokenizer_class": "PreTrainedTokenizerFast"}
        if self.bos:
            c["bos_token"] = self.bos
        if self.eos:
            c["eos_token"] = self.eos
        return c


class SentencePieceRef:
    """Llama 2 style (normalizer Prepend + Replace) or Mistral style (Metaspace, first)."""

    def __init__(self, name, metaspace, n_merges):
        self.name, self.metaspace = name, metaspace
        self.vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
        for b in range(256):
            self.vocab["<0x%02X>" % b] = len(self.vocab)
        withheld = set("日本語\U0001F642\u2713")
        chars = sorted(set(CORPUS.replace(" ", SP).replace("\n", "")) - withheld | {SP})
        for c in chars:
            self.vocab[c] = len(self.vocab)
        norm = SP + CORPUS.replace(" ", SP)
        words = [tuple(w) for w in regex.findall(SP + "*[^" + SP + "]*", norm) if w]
        self.merges = [m for m in learn_merges(words, n_merges)
                       if m[0] in self.vocab or len(m[0]) > 1]
        self.merges = [m for m in self.merges if "\n" not in m[0] + m[1]]
        for a, b in self.merges:
            if a + b not in self.vocab:
                self.vocab[a + b] = len(self.vocab)
        self.ranks = {m: i for i, m in enumerate(self.merges)}
        self.specials = {"<unk>": 0, "<s>": 1, "</s>": 2}

    def encode(self, text):
        ids, offset = [], 0
        for special, piece in split_special(text, list(self.specials)):
            start, offset = offset, offset + len(piece)
            if special:
                ids.append(self.specials[piece])
                continue
            if self.metaspace:
                w = piece.replace(" ", SP)
                if not w.startswith(SP) and start == 0:  # prepend_scheme "first"
                    w = SP + w
            else:
                w = SP + piece.replace(" ", SP)  # Prepend, then Replace
            symbols = []
            for ch in w:
                if ch in self.vocab:
                    symbols.append(ch)
                else:
                    symbols += ["<0x%02X>" % b for b in ch.encode()]
            ids += [self.vocab[s] for s in bpe(symbols, self.ranks)]
        return ids

    def tokenizer_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s, i in self.specials.items()]
        if self.metaspace:
            norm = None
            pre = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
        else:
            norm = {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": SP},
                {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
            pre = None
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [], "special_tokens": {}}
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                "normalizer": norm, "pre_tokenizer": pre, "post_processor": post,
                "decoder": None,
                "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                          "continuing_subword_prefix": None, "end_of_word_suffix": None,
                          "fuse_unk": True, "byte_fallback": True, "vocab": self.vocab,
                          "merges": [a + " " + b for a, b in self.merges]}}

    def config(self):
        return {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                "eos_token": "</s>", "unk_token": "<unk>",
                "tokenizer_class": "LlamaTokenizer"}


def main():
    kinds = [
        ByteLevelRef("gpt2", GPT2_RE, 120, ["<|endoftext|>"], eos="<|endoftext|>",
                     bos="") ,
        ByteLevelRef("llama3", LLAMA3_RE, 120, ["<|begin_of_text|>", "<|end_of_text|>"],
                     ignore_merges=True, bos="<|begin_of_text|>", eos="<|end_of_text|>",
                     special_base=128000),
        ByteLevelRef("qwen2", QWEN2_RE, 120, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                     nfc=True, eos="<|endoftext|>"),
        SentencePieceRef("llama2", False, 120),
        SentencePieceRef("mistral", True, 120),
    ]
    for k in kinds:
        d = os.path.join(OUT, k.name)
        os.makedirs(d, exist_ok=True)
        specials = list(k.specials)
        texts = TEXTS + [specials[0] + "Hello" + specials[-1] + " world " + specials[0],
                         "a " + specials[-1] + " b"]
        cases = [{"text": t, "ids": k.encode(t)} for t in texts]
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(k.tokenizer_json(), f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(k.config(), f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "cases.json"), "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
        print(k.name, len(k.vocab), "tokens", len(k.merges), "merges")


if __name__ == "__main__":
    main()
