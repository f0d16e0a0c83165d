#!/usr/bin/env python3
"""Checks a Hugging Face model directory with Python's own json and struct, independently
of zinc's C code: what transformers and safetensors expect of the files.

    python3 scripts/hf_check.py DIR

- config.json and model.safetensors.index.json are exactly json.dumps(obj, indent=2,
  sort_keys=True) + "\\n" (how transformers writes them);
- every shard's header parses, its tensors are F32/BF16/F16 with offsets that tile the data
  section, the header is padded to 8 bytes and its metadata is {"format": "pt"};
- the index names every tensor of every shard and nothing else, its shards are named
  model-0000K-of-0000N.safetensors, and metadata.total_size is the sum of tensor bytes.
Prints "ok: N tensors in M files" or the first problem, and exits 0 or 1.
"""
import json
import os
import re
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def fail(msg):
    print("hf_check: " + msg)
    sys.exit(1)


def check_dumps(path):
    text = open(path, encoding="utf-8").read()
    obj = json.loads(text)
    if text != json.dumps(obj, indent=2, sort_keys=True) + "\n":
        fail(path + ": not json.dumps(indent=2, sort_keys=True) output")
    return obj


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if (8 + n) % 8:
        fail(path + ": header not padded to 8 bytes")
    header = json.loads(data[8:8 + n])
    body = len(data) - 8 - n
    meta = header.pop("__metadata__", None)
    if meta != {"format": "pt"} and not (meta and meta.get("format") == "pt"):
        fail(path + ": metadata %r has no format pt" % (meta,))
    spans = []
    for name, t in header.items():
        if t["dtype"] not in SIZES:
            fail("%s: %s has dtype %s" % (path, name, t["dtype"]))
        numel = 1
        for d in t["shape"]:
            numel *= d
        b, e = t["data_offsets"]
        if e - b != numel * SIZES[t["dtype"]]:
            fail("%s: %s offsets do not match its shape" % (path, name))
        spans.append((b, e))
    at = 0
    for b, e in sorted(spans):
        if b != at:
            fail(path + ": tensors do not tile the data section")
        at = e
    if at != body:
        fail(path + ": bytes after the last tensor")
    return {k: v for k, v in header.items()}


def main():
    d = sys.argv[1]
    config = check_dumps(os.path.join(d, "config.json"))
    if config.get("model_type") not in ("gpt2", "llama", "qwen2", "mistral"):
        fail("config.json: model_type %r" % config.get("model_type"))
    index_path = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        tensors = read_shard(os.path.join(d, "model.safetensors"))
        print("ok: %d tensors in 1 file" % len(tensors))
        return
    index = check_dumps(index_path)
    wm = index["weight_map"]
    files = sorted(set(wm.values()))
    n = len(files)
    total = 0
    for k, name in enumerate(files):
        if name != "model-%05d-of-%05d.safetensors" % (k + 1, n):
            fail("shard %s is not model-%05d-of-%05d.safetensors" % (name, k + 1, n))
        tensors = read_shard(os.path.join(d, name))
        want = sorted(t for t, f in wm.items() if f == name)
        if sorted(tensors) != want:
            fail("%s holds %s, the index says %s" % (name, sorted(tensors), want))
        total += sum(t["data_offsets"][1] - t["data_offsets"][0] for t in tensors.values())
    if index["metadata"]["total_size"] != total:
        fail("metadata.total_size %r, tensors hold %d bytes" %
             (index["metadata"]["total_size"], total))
    extra = [f for f in os.listdir(d) if re.match(r"model.*\.safetensors$", f)
             and f not in files]
    if extra:
        fail("files the index does not name: %s" % extra)
    print("ok: %d tensors in %d files" % (len(wm), n))


if __name__ == "__main__":
    main()
