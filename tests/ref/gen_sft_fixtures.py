#!/usr/bin/env python3
"""Writes tests/ref/sft/: conversations ({"messages": [{"role", "content"}]} JSONL) and the
token ids and loss mask zinc tokenize --template must produce for them, computed HERE,
independently of zinc's C code (src/data/sft.c):

- the templates are written from Hugging Face's chat templates (Llama 3's
  tokenizer_config.json chat_template: bos_token, then per message
  '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + content|trim + '<|eot_id|>';
  ChatML: '<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n');
- the rendered conversation is tokenized WHOLE with gen_tokenizer_fixtures.py's reference
  (the `regex` module and OpenAI's merge-all-occurrences BPE), and the mask comes from byte
  offsets, as transformers' return_assistant_tokens_mask does from its offset mapping
  (every token from the one holding a span's first character to the one holding its last):
  a token counts when any of its bytes lies in an assistant message's content or in that
  message's end-of-turn token (<|eot_id|>, <|im_end|>); everything else (headers, roles,
  system and user turns, the document delimiter) is -100 in Hugging Face's labels.

Tokenizers: tests/ref/sft/llama3 is the tiny Llama 3 fixture of gen_tokenizer_fixtures.py
with Llama 3's chat tokens added at their real ids (128006 <|start_header_id|>, 128007
<|end_header_id|>, 128009 <|eot_id|>); ChatML uses tests/ref/tok/qwen2 as it is (its
<|im_start|> and <|im_end|>). Run: python3 tests/ref/gen_sft_fixtures.py (needs `regex`).
The output is committed; tests/test_sft.c reads it.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_fixtures as g  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sft")

CONVERSATIONS = [
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "2 + 2 = 4."}],
    [{"role": "user", "content": "  Say hello in French.\n"},
     {"role": "assistant", "content": "Bonjour! Ça va?"},
     {"role": "user", "content": "And in Russian?"},
     {"role": "assistant", "content": "\nПривет, мир.  "}],
    [{"role": "user", "content": "Write code."},
     {"role": "assistant", "content": "    return x + y;\n\nDone.\n"}],
    [{"role": "user", "content": "no answer here"}],
]


class Llama3Chat:
    name = "llama3"

    def __init__(self):
        self.ref = g.ByteLevelRef("llama3", g.LLAMA3_RE, 120,
                                  ["<|begin_of_text|>", "<|end_of_text|>"],
                                  ignore_merges=True, bos="<|begin_of_text|>",
                                  eos="<|end_of_text|>", special_base=128000)
        self.ref.specials.update({"<|start_header_id|>": 128006, "<|end_header_id|>": 128007,
                                  "<|eot_id|>": 128009})

    def render(self, messages):
        """[(text, counts)] pieces"""
        out = [("<|begin_of_text|>", False)]
        for m in messages:
            out.append(("<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n", False))
            a = m["role"] == "assistant"
            out.append((m["content"].strip(), a))
            out.append(("<|eot_id|>", a))
        return out


class ChatML:
    name = "chatml"

    def __init__(self):
        self.ref = g.ByteLevelRef("qwen2", g.QWEN2_RE, 120,
                                  ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  nfc=True, eos="<|endoftext|>")

    def render(self, messages):
        # the document delimiter as zinc tokenize writes it: EOS before (no BOS added)
        out = [("<|endoftext|>", False)]
        for m in messages:
            a = m["role"] == "assistant"
            out.append(("<|im_start|>" + m["role"] + "\n", False))
            out.append((m["content"], a))
            out.append(("<|im_end|>", a))
            out.append(("\n", False))
        return out


def encode_with_offsets(ref, text):
    """ids and each token's byte range [start, end), tokenizing text whole"""
    ids, offs = [], []
    pos = 0  # in bytes
    for special, piece in g.split_special(text, list(ref.specials)):
        if special:
            ids.append(ref.specials[piece])
            offs.append((pos, pos + len(piece.encode())))
            pos += len(piece.encode())
            continue
        for w in g.regex.findall(ref.split_re, piece):
            mapped = "".join(g.B2U[b] for b in w.encode())
            if ref.ignore_merges and mapped in ref.vocab:
                syms = [mapped]
            else:
                syms = g.bpe(mapped, ref.ranks)
            for s in syms:  # one mapped character per byte
                ids.append(ref.vocab[s])
                offs.append((pos, pos + len(s)))
                pos += len(s)
    assert pos == len(text.encode())
    return ids, offs


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "chats.jsonl"), "w") as f:
        for c in CONVERSATIONS:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    for t in (Llama3Chat(), ChatML()):
        cases = []
        for c in CONVERSATIONS:
            pieces = t.render(c)
            text = "".join(p for p, _ in pieces)
            spans, pos = [], 0
            for p, counts in pieces:
                n = len(p.encode())
                if counts:
                    spans.append((pos, pos + n))
                pos += n
            ids, offs = encode_with_offsets(t.ref, text)
            mask = [1 if any(o < b and a < e for a, b in spans) else 0 for o, e in offs]
            cases.append({"text": text, "ids": ids, "mask": mask})
        with open(os.path.join(OUT, t.name + ".json"), "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) +
                    "\n]\n")
        print(t.name, [len(c["ids"]) for c in cases], "tokens,",
              [sum(c["mask"]) for c in cases], "counted")
    tdir = os.path.join(OUT, "llama3")
    os.makedirs(tdir, exist_ok=True)
    ref = Llama3Chat().ref
    with open(os.path.join(tdir, "tokenizer.json"), "w") as f:
        json.dump(ref.tokenizer_json(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(tdir, "tokenizer_config.json"), "w") as f:
        json.dump(ref.config(), f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
