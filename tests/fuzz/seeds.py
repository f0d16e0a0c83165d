#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

A seed named ok-* must be accepted by its target, bad-* refused (replay_main.c checks
both); files the fuzzers add (their hashes as names) and crash-* regressions are only
replayed. Rerun after changing a seed here: python3 tests/fuzz/seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- config (DeepSpeed-style JSON) ----------------------------------------------------
def config_seeds():
    full = {
        "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 4, "gradient_clipping": 1.0, "steps_per_print": 10,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95],
                                                  "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                     "warmup_num_steps": 100,
                                                     "warmup_type": "linear"}},
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "contiguous_gradients": True, "overlap_comm": True,
                              "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_max_live_parameters": 1e9, "sub_group_size": 1e9,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True},
                              "offload_param": {"device": "cpu", "pin_memory": True}},
        "aio": {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1,
                "single_submit": False, "overlap_events": True},
        "zinc": {"device": "host", "seed": 1234, "deterministic": True, "numa_node": -1},
    }
    put("config", "ok-full.json", json.dumps(full, indent=2))
    put("config", "ok-empty-object.json", "{}")
    put("config", "ok-nvme.json", json.dumps({
        "zero_optimization": {"stage": 3,
                              "offload_optimizer": {"device": "nvme",
                                                    "nvme_path": ["/tmp", "."],
                                                    "buffer_count": 4, "pipeline_read": True},
                              "offload_param": {"device": "nvme", "nvme_path": "/tmp",
                                                "buffer_count": 5, "buffer_size": 1e8}}}))
    put("config", "ok-fp16-auto.json", json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
        "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                 "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
        "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 1000,
                                                          "warmup_num_steps": 10}}}))
    put("config", "ok-ignored-and-unknown.json", json.dumps({
        "wall_clock_breakdown": False, "zero_optimization": {"stage": 2, "stag": 1},
        "trian_batch_size": 3}))
    put("config", "bad-syntax.json", '{"train_batch_size": 16,}')
    put("config", "bad-not-object.json", "[1, 2, 3]")
    put("config", "bad-empty.json", "")
    put("config", "bad-wrong-type.json", '{"zero_optimization": {"stage": "three"}}')
    put("config", "bad-object-expected.json", '{"zero_optimization": 3}')
    put("config", "bad-aio-nested.json", '{"zero_optimization": {"aio": {"queue_depth": 8}}}')
    put("config", "bad-enum.json", '{"optimizer": {"type": "SGD"}}')
    put("config", "bad-nine-paths.json", json.dumps(
        {"zero_optimization": {"offload_optimizer": {"device": "nvme",
                                                     "nvme_path": ["/p%d" % i for i in range(9)]}}}))
    put("config", "bad-negative-stage.json", '{"zero_optimization": {"stage": -1}}')
    # core/json: the last of a repeated key (a repeated object replaces the first whole);
    # a float key's value must fit a float; NUL is never the end of the text
    put("config", "ok-repeated-key.json",
        '{"optimizer": {"type": "AdamW", "params": {"lr": 0.1, "eps": 1e-6}},\n'
        ' "optimizer": {"type": "AdamW", "params": {"lr": 0.2}}}')
    put("config", "bad-lr-overflow.json", '{"optimizer": {"type": "AdamW", "params": {"lr": 1e300}}}')
    put("config", "bad-eps-underflow.json", '{"optimizer": {"params": {"eps": 1e-50}}}')
    put("config", "bad-nul-after.json", b'{"steps_per_print": 3}\0{"x": 1}')
    put("config", "bad-nul-escape.json", '{"zinc": {"run_id": "a\\u0000b"}}')
    put("config", "bad-bom.json", b'\xef\xbb\xbf{}')


# ---- safetensors ------------------------------------------------------------------------
def st(tensors, meta=None, pad=True, data_extra=b"", header_override=None):
    """tensors: list of (name, dtype, shape, bytes); offsets laid out back to back."""
    header, data, at = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    if header_override is not None:
        h = header_override
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data + data_extra


def f32(n, start=0.0):
    return struct.pack("<%df" % n, *[start + 0.25 * i for i in range(n)])


def bf16(n):
    return b"".join(struct.pack("<f", 0.125 * (i % 17) - 1.0)[2:] for i in range(n))


def gpt2_tensors(L=1, C=8, V=16, P=8, dtype="BF16"):
    raw = bf16 if dtype == "BF16" else f32
    size = 2 if dtype == "BF16" else 4
    t = [("wte.weight", [V, C]), ("wpe.weight", [P, C])]
    for l in range(L):
        p = "h.%d." % l
        t += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
              (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
              (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
              (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
              (p + "mlp.c_fc.weight", [C, 4 * C]), (p + "mlp.c_fc.bias", [4 * C]),
              (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
    t += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    out = []
    for name, shape in t:
        n = 1
        for s in shape:
            n *= s
        out.append((name, dtype, shape, raw(n)))
    return out


def safetensors_seeds():
    put("safetensors", "ok-one-f32.st", st([("w", "F32", [2, 3], f32(6))]))
    put("safetensors", "ok-empty.st", st([]))
    put("safetensors", "ok-scalar-and-zero.st",
        st([("s", "F32", [], f32(1)), ("z", "F16", [0, 4], b"")]))
    put("safetensors", "ok-dtypes.st", st([
        ("a", "BF16", [3], bf16(3)), ("b", "F16", [2], b"\x00\x3c\x00\xc0"),
        ("c", "I64", [1], struct.pack("<q", -5)), ("d", "BOOL", [2], b"\x01\x00"),
        ("e", "U8", [3], b"abc"), ("f", "F8_E4M3", [1], b"\x38"), ("g", "F64", [1], struct.pack("<d", 2.5))]))
    put("safetensors", "ok-metadata.st",
        st([("w", "F32", [1], f32(1))], meta={"format": "pt", "n_head": "2"}))
    put("safetensors", "ok-gpt2-bf16.st", st(gpt2_tensors(), meta={"n_head": "2"}))
    put("safetensors", "ok-gpt2-f32-noheads.st", st(gpt2_tensors(L=2, C=4, V=8, P=4, dtype="F32")))
    prefixed = [("transformer." + n, d, sh, r) for n, d, sh, r in gpt2_tensors(C=4, V=8, P=4)]
    prefixed.append(("lm_head.weight", "BF16", [8, 4], prefixed[0][3]))
    put("safetensors", "ok-gpt2-prefixed-tied.st", st(prefixed, meta={"n_head": "1"}))
    put("safetensors", "ok-gpt2-huge-heads.st", st(gpt2_tensors(), meta={"n_head": "4294967297"}))
    put("safetensors", "bad-short.st", b"\x08\x00\x00")
    put("safetensors", "bad-header-beyond-file.st", struct.pack("<Q", 1 << 40) + b"{}")
    put("safetensors", "bad-not-json.st", st([], header_override=b"{not json"))
    put("safetensors", "bad-array-header.st", st([], header_override=b"[]"))
    put("safetensors", "bad-truncated.st", st([("w", "F32", [4], f32(4))])[:-3])
    put("safetensors", "bad-trailing.st", st([("w", "F32", [1], f32(1))], data_extra=b"\0" * 4))
    put("safetensors", "bad-unknown-dtype.st", st([("w", "Q4", [1], b"\0")]))
    put("safetensors", "bad-shape-span.st", st([("w", "F32", [3], f32(2))]))
    put("safetensors", "bad-negative-dim.st",
        st([], header_override=b'{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}'))
    put("safetensors", "bad-overlap.st", st([], header_override=(
        b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        b'"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}'), data_extra=b"abc"))
    put("safetensors", "bad-hole.st", st([], header_override=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'), data_extra=b"ab"))
    put("safetensors", "bad-duplicate.st", st([], header_override=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'), data_extra=b"ab"))
    put("safetensors", "bad-metadata-number.st",
        st([("w", "F32", [1], f32(1))], meta={"n_head": 2}))
    put("safetensors", "bad-nine-dims.st", st([("w", "U8", [1] * 9, b"a")]))
    put("safetensors", "bad-dim-overflow.st", st([], header_override=(
        b'{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}')))
    # repeated keys as the Rust reader takes them: a name's last entry, one __metadata__,
    # a tensor's fields once; the header padded with spaces, never NUL bytes
    put("safetensors", "ok-repeated-name-last.st", st([], header_override=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'), data_extra=b"ab"))
    put("safetensors", "bad-repeated-metadata.st", st([], header_override=(
        b'{"__metadata__":{},"__metadata__":{},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'), data_extra=b"a"))
    put("safetensors", "bad-repeated-field.st", st([], header_override=(
        b'{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}'), data_extra=b"a"))
    h = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    h += b"\0" * (-len(h) % 8 or 8)
    put("safetensors", "bad-nul-padded.st", struct.pack("<Q", len(h)) + h + b"a")
    put("safetensors", "bad-float-offset.st", st([], header_override=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}}'), data_extra=b"a"))


# ---- data (llm.c token files and text) ---------------------------------------------------
def tokfile(version, tokens, count=None, magic=20240520):
    h = [magic, version, len(tokens) if count is None else count] + [0] * 253
    fmt = "<%dH" if version == 1 else "<%dI"
    return struct.pack("<256i", *h) + struct.pack(fmt % len(tokens), *tokens)


def data_seeds():
    put("data", "ok-text.txt", "the quick brown fox jumps over the lazy dog\n")
    put("data", "ok-tokens-v1.bin", tokfile(1, [i * 997 % 50257 for i in range(40)]))
    put("data", "ok-tokens-v2.bin", tokfile(2, [i * 40009 % 128256 for i in range(40)]))
    put("data", "bad-tokens-v2-bigid.bin", tokfile(2, [7] * 20 + [0xFFFFFFFF] + [3] * 20))
    put("data", "bad-text-too-short.txt", "abc")
    put("data", "bad-empty.bin", b"")
    put("data", "bad-version.bin", tokfile(3, [1] * 40))
    put("data", "bad-truncated.bin", tokfile(1, [1] * 40)[:-1])
    put("data", "bad-trailing.bin", tokfile(1, [1] * 40) + b"\0\0")
    put("data", "bad-negative-count.bin", tokfile(1, [1] * 40, count=-1))
    put("data", "bad-header-short.bin", struct.pack("<3i", 20240520, 1, 0))
    put("data", "bad-few-tokens.bin", tokfile(1, [1] * 6))
    # llm.c Llama 3 files; text must be UTF-8 without NUL; anything else is refused
    put("data", "ok-tokens-llama3.bin",
        tokfile(7, [i * 40009 % 128256 for i in range(40)], magic=20240801))
    put("data", "bad-llama3-version1.bin", tokfile(1, [1] * 40, magic=20240801))
    put("data", "ok-text-utf8.txt", "caf\u00e9 \u20ac na\u00efve \U0001F600 r\u00e9sum\u00e9\n")
    put("data", "bad-binary-no-header.bin", struct.pack("<40H", *[1000 + 37 * i for i in range(40)]))
    put("data", "bad-text-nul.txt", b"the quick brown\0fox jumps over the lazy dog")
    put("data", "bad-text-cut-utf8.txt", "the quick brown fox jumps \u20ac".encode()[:-1])


# ---- Hugging Face config.json -------------------------------------------------------------
def hf_config_seeds():
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64,
            "n_head": 4, "n_layer": 2, "n_positions": 64, "n_inner": None, "vocab_size": 256,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
             "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
             "torch_dtype": "bfloat16",
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}}
    qwen2 = dict(llama, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                 rope_scaling=None, use_sliding_window=False, sliding_window=4096,
                 tie_word_embeddings=True)
    del qwen2["attention_bias"], qwen2["mlp_bias"]
    mistral = dict(llama, architectures=["MistralForCausalLM"], model_type="mistral",
                   rope_scaling=None, sliding_window=None, head_dim=16)
    del mistral["attention_bias"], mistral["mlp_bias"]
    for name, cfg in (("gpt2", gpt2), ("llama", llama), ("qwen2", qwen2), ("mistral", mistral)):
        put("hf_config", "ok-%s.json" % name, json.dumps(cfg, indent=2))
    put("hf_config", "bad-unknown-type.json", json.dumps(dict(llama, model_type="bert")))
    put("hf_config", "bad-missing-hidden.json",
        json.dumps({k: v for k, v in llama.items() if k != "hidden_size"}))
    put("hf_config", "bad-zero-layers.json", json.dumps(dict(llama, num_hidden_layers=0)))
    put("hf_config", "bad-heads-kv.json", json.dumps(dict(llama, num_key_value_heads=3)))
    put("hf_config", "bad-mlp-bias.json", json.dumps(dict(llama, mlp_bias=True)))
    put("hf_config", "bad-rope-type.json",
        json.dumps(dict(llama, rope_scaling={"rope_type": "yarn", "factor": 4.0})))
    put("hf_config", "bad-huge-hidden.json", json.dumps(dict(llama, hidden_size=2 ** 64)))
    put("hf_config", "bad-syntax.json", '{"model_type": "llama",')
    put("hf_config", "bad-not-object.json", '"llama"')
    body = json.dumps(llama)[1:-1]
    put("hf_config", "ok-repeated-key-last.json", '{"hidden_act": "gelu", %s}' % body)
    put("hf_config", "bad-repeated-key-last.json", '{%s, "hidden_act": "gelu"}' % body)
    put("hf_config", "bad-nul-after.json", json.dumps(llama).encode() + b"\0")


# ---- Hugging Face model.safetensors.index.json --------------------------------------------
def hf_index_seeds():
    """The directory fuzz_hf_index.c builds: a llama with 1 layer, embeddings and layer 0 in
    the first shard, final norm and lm_head in the second."""
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    p = "model.layers.0."
    first = ["model.embed_tokens.weight", p + "input_layernorm.weight",
             p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
             p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight",
             p + "post_attention_layernorm.weight", p + "mlp.gate_proj.weight",
             p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    second = ["model.norm.weight", "lm_head.weight"]
    wm = dict([(n, s1) for n in first] + [(n, s2) for n in second])
    good = {"metadata": {"total_size": 1152}, "weight_map": wm}
    put("hf_index", "ok-index.json", json.dumps(good, indent=2))
    put("hf_index", "ok-no-metadata.json", json.dumps({"weight_map": wm}))
    put("hf_index", "bad-missing-tensor.json",
        json.dumps({"weight_map": {k: v for k, v in wm.items() if k != "lm_head.weight"}}))
    put("hf_index", "bad-wrong-shard.json",
        json.dumps({"weight_map": dict(wm, **{"lm_head.weight": s1})}))
    put("hf_index", "bad-no-such-shard.json",
        json.dumps({"weight_map": dict(wm, **{"lm_head.weight": "model-00003-of-00003.safetensors"})}))
    put("hf_index", "bad-path-escape.json",
        json.dumps({"weight_map": dict(wm, **{"lm_head.weight": "../" + s2})}))
    put("hf_index", "bad-no-weight-map.json", json.dumps({"metadata": {"total_size": 1}}))
    put("hf_index", "bad-weight-map-array.json", json.dumps({"weight_map": [s1, s2]}))
    put("hf_index", "bad-value-number.json", json.dumps({"weight_map": dict(wm, **{"lm_head.weight": 2})}))
    put("hf_index", "bad-syntax.json", '{"weight_map": {')
    put("hf_index", "bad-empty.json", "")
    body = json.dumps(wm)[1:-1]
    put("hf_index", "ok-repeated-last-right.json",
        '{"weight_map": {"lm_head.weight": "%s", %s}}' % (s1, body))
    put("hf_index", "bad-repeated-last-wrong.json",
        '{"weight_map": {%s, "lm_head.weight": "%s"}}' % (body, s1))


# ---- PEFT adapter_config.json -------------------------------------------------------------
def peft_config_seeds():
    """fuzz_peft_config.c's adapter: GPT-2, LoRA r 4, alpha 8 on c_attn."""
    zinc = ('{\n  "peft_type": "LORA",\n  "task_type": "CAUSAL_LM",\n'
            '  "base_model_name_or_path": null,\n  "r": 4,\n  "lora_alpha": 8,\n'
            '  "lora_dropout": 0,\n  "use_rslora": false,\n  "target_modules": ["c_attn"],\n'
            '  "fan_in_fan_out": true,\n  "bias": "none",\n  "inference_mode": true,\n'
            '  "init_lora_weights": true,\n  "modules_to_save": null,\n'
            '  "layers_to_transform": null,\n  "layers_pattern": null,\n'
            '  "rank_pattern": {},\n  "alpha_pattern": {},\n  "revision": null\n}\n')
    peft = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": None,
            "bias": "none", "fan_in_fan_out": True, "inference_mode": True,
            "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
            "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 8,
            "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core",
            "modules_to_save": None, "peft_type": "LORA", "r": 4, "rank_pattern": {},
            "revision": None, "target_modules": ["c_attn"], "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": False}
    put("peft_config", "ok-zinc.json", zinc)
    put("peft_config", "ok-peft.json", json.dumps(peft, indent=2, sort_keys=True))
    body = json.dumps(peft)[1:-1]
    put("peft_config", "ok-repeated-r-last.json", '{"r": 8, %s}' % body)
    put("peft_config", "bad-repeated-r-last.json", '{%s, "r": 8}' % body)
    put("peft_config", "bad-r.json", json.dumps(dict(peft, r=8)))
    put("peft_config", "bad-alpha.json", json.dumps(dict(peft, lora_alpha=16)))
    put("peft_config", "bad-rslora.json", json.dumps(dict(peft, use_rslora=True)))
    put("peft_config", "bad-nul-after.json", json.dumps(peft).encode() + b"\0")
    put("peft_config", "bad-nul-escape.json", '{%s, "revision": "a\\u0000b"}' % body)
    put("peft_config", "bad-syntax.json", '{"r": 4, "lora_alpha": 8,}')
    put("peft_config", "bad-not-object.json", "[4, 8]")
    put("peft_config", "bad-empty.json", "")


# ---- Hugging Face tokenizer.json ------------------------------------------------------------
def tokenizer_seeds():
    """fuzz_tokenizer.c loads the input as a directory's tokenizer.json: the test fixtures
    (tests/ref/tok) as they are, and small BPE models tokenizers refuses."""
    ref = os.path.join(HERE, "..", "ref", "tok")
    for kind in sorted(os.listdir(ref)):
        with open(os.path.join(ref, kind, "tokenizer.json"), "rb") as f:
            put("tokenizer", "ok-%s.json" % kind, f.read())

    def bpe(vocab, merges, added=()):
        return json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": merges},
                           "added_tokens": list(added)})
    abc = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4}
    put("tokenizer", "ok-abc.json", bpe(abc, ["a b", "b c"]))
    put("tokenizer", "ok-repeated-merge.json", bpe(abc, ["a b", "b c", "a b"]))
    put("tokenizer", "ok-version-line.json", bpe(abc, ["#version: 0.2", "a b"]))
    put("tokenizer", "ok-pair-merges.json", bpe(abc, [["a", "b"], ["b", "c"]]))
    put("tokenizer", "ok-added-sparse.json",
        bpe(abc, ["a b"], [{"id": 128000, "content": "<s>", "special": True}]))
    put("tokenizer", "ok-repeated-vocab-key.json",
        '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "a": 3}, '
        '"merges": ["a b"]}, "added_tokens": []}')
    put("tokenizer", "bad-empty-vocab.json", bpe({}, []))
    put("tokenizer", "bad-merge-part.json", bpe(abc, ["a x"]))
    put("tokenizer", "bad-merge-result.json", bpe(abc, ["a c"]))
    put("tokenizer", "bad-merge-three.json", bpe(abc, ["a b c"]))
    put("tokenizer", "bad-merge-pair-three.json", bpe(abc, [["a", "b", "c"]]))
    put("tokenizer", "bad-merge-one.json", bpe(abc, ["ab"]))
    put("tokenizer", "bad-float-id.json", bpe(dict(abc, a=0.5), []))
    put("tokenizer", "bad-whole-float-id.json", bpe(dict(abc, a=1.0), []))
    put("tokenizer", "bad-huge-id.json", bpe({"a": 2 ** 31 - 100}, []))
    put("tokenizer", "bad-huge-added-id.json",
        bpe(abc, [], [{"id": 10 ** 10, "content": "<s>"}]))
    put("tokenizer", "bad-invalid-utf8.json",
        b'{"model": {"type": "BPE", "vocab": {"a": 0, "\xff": 1}, "merges": []}}')
    put("tokenizer", "bad-nul-key.json", bpe({"a\0": 0}, []))
    put("tokenizer", "bad-wordpiece.json", '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}')
    put("tokenizer", "bad-syntax.json", '{"model": {"type": "BPE", "vocab": {"a": 0},}}')
    put("tokenizer", "bad-empty.json", "")


# ---- ckpt_meta (a checkpoint's zinc-checkpoint.txt) ---------------------------------------
def ckpt_meta_text(world=1, dtype="fp32", extra=None, drop=(), **over):
    """A 2-layer metadata body (no crc32 line: the target appends it) with fields over."""
    numel = [96, 40]
    fixed = 64 + 8 + 24 * len(numel)
    total = sum(numel)
    kv = [("zinc_checkpoint", "1"), ("step", "4"), ("skipped", "0"), ("data_step", "8"),
          ("global_micro", str(2 * world)), ("seq", "16"), ("world", str(world)),
          ("stage", "3"), ("dtype", dtype), ("seed", "1337"), ("family", "gpt2"),
          ("ls.scale", "0x1p+16" if dtype == "fp16" else "0x0p+0"),
          ("ls.cur_hysteresis", "2" if dtype == "fp16" else "0"),
          ("ls.iter", "4" if dtype == "fp16" else "0"),
          ("ls.last_overflow_iter", "-1" if dtype == "fp16" else "0"), ("layers", "2"),
          ("layer.0", "96"), ("tensor.0.0", "transformer.wte.weight 8x8"),
          ("tensor.0.1", "transformer.wpe.weight 4x8"),
          ("layer.1", "40"), ("tensor.1.0", "transformer.h.0.ln_1.weight 8x1")]
    for r in range(world):
        share = sum(n // world + (1 if r < n % world else 0) for n in numel)
        kv.append(("rank.%d" % r, "%d %08x" % (fixed + 12 * share, 0x1234abcd + r)))
    kv += [("config", "2780 928b87eb"), ("data.path", "data/demo.txt"),
           ("data.size", "39458"), ("data.crc32", "dcb007ad")]
    kv = [(k, over.get(k.replace(".", "_"), v)) for k, v in kv if k not in drop]
    kv += extra or []
    return "".join("%s=%s\n" % (k, v) for k, v in kv)


def with_crc(text):
    import zlib
    return text + "crc32=%08x\n" % (zlib.crc32(text.encode()) & 0xffffffff)


def ckpt_meta_seeds():
    t = "ckpt_meta"
    put(t, "ok-fp32.txt", ckpt_meta_text())
    put(t, "ok-fp32-with-crc.txt", with_crc(ckpt_meta_text()))
    put(t, "ok-fp16.txt", ckpt_meta_text(dtype="fp16"))
    put(t, "ok-world3.txt", ckpt_meta_text(world=3))
    put(t, "ok-seed-above-int64.txt", ckpt_meta_text(seed="18446744073709551615"))
    put(t, "ok-no-data-identity.txt",
        ckpt_meta_text(drop=("data.path", "data.size", "data.crc32")))
    put(t, "bad-crc.txt", ckpt_meta_text() + "crc32=00000000\n")
    put(t, "bad-crc-short.txt", with_crc(ckpt_meta_text())[:-3] + "\n")
    put(t, "bad-skipped-over-step.txt", ckpt_meta_text(skipped="5"))
    put(t, "bad-step-near-int64-max.txt",
        ckpt_meta_text(step="9223372036854775806", data_step="9223372036854775807"))
    put(t, "bad-step-over-int32.txt",
        ckpt_meta_text(step="2147483648", data_step="4294967296"))
    put(t, "bad-data-step-below-step.txt", ckpt_meta_text(data_step="3"))
    put(t, "bad-negative-step.txt", ckpt_meta_text(step="-1"))
    put(t, "bad-step-plus-sign.txt", ckpt_meta_text(step="+4"))
    put(t, "bad-step-leading-zero.txt", ckpt_meta_text(step="04"))
    put(t, "bad-global-micro-not-world-multiple.txt", ckpt_meta_text(world=3, global_micro="4"))
    put(t, "bad-global-micro-zero.txt", ckpt_meta_text(global_micro="0"))
    put(t, "bad-seq-zero.txt", ckpt_meta_text(seq="0"))
    put(t, "bad-stage-4.txt", ckpt_meta_text(stage="4"))
    put(t, "bad-dtype.txt", ckpt_meta_text(dtype="int8"))
    put(t, "bad-seed-over-uint64.txt", ckpt_meta_text(seed="18446744073709551616"))
    put(t, "bad-seed-negative.txt", ckpt_meta_text(seed="-1"))
    put(t, "bad-fp16-scale-zero.txt", ckpt_meta_text(dtype="fp16", ls_scale="0x0p+0"))
    put(t, "bad-scale-nan.txt", ckpt_meta_text(dtype="fp16", ls_scale="nan"))
    put(t, "bad-scale-inf.txt", ckpt_meta_text(ls_scale="inf"))
    put(t, "bad-scale-negative.txt", ckpt_meta_text(ls_scale="-0x1p+0"))
    put(t, "bad-fp16-hysteresis-zero.txt", ckpt_meta_text(dtype="fp16", ls_cur_hysteresis="0"))
    put(t, "bad-hysteresis-over-int.txt", ckpt_meta_text(ls_cur_hysteresis="4294967297"))
    put(t, "bad-ls-iter-over-step.txt", ckpt_meta_text(dtype="fp16", ls_iter="5"))
    put(t, "bad-last-overflow-over-iter.txt",
        ckpt_meta_text(dtype="fp16", ls_last_overflow_iter="4"))
    put(t, "bad-last-overflow-below-minus-one.txt",
        ckpt_meta_text(dtype="fp16", ls_last_overflow_iter="-2"))
    put(t, "bad-duplicate-key.txt", ckpt_meta_text(extra=[("step", "4")]))
    put(t, "bad-unknown-key.txt", ckpt_meta_text(extra=[("resume_anyway", "1")]))
    put(t, "bad-layer-index-out-of-range.txt", ckpt_meta_text(extra=[("layer.2", "8")]))
    put(t, "bad-layer-index-leading-zero.txt", ckpt_meta_text(extra=[("layer.01", "40")]))
    put(t, "bad-rank-index-out-of-range.txt", ckpt_meta_text(extra=[("rank.1", "100 00000000")]))
    put(t, "bad-tensor-gap.txt", ckpt_meta_text(extra=[("tensor.1.2", "x 1x1")]))
    put(t, "bad-tensor-over-layer.txt", ckpt_meta_text(tensor_1_0="transformer.h.0.ln_1.weight 8x6"))
    put(t, "bad-tensor-shape-overflow.txt",
        ckpt_meta_text(tensor_0_0="w 4294967296x4294967296"))
    put(t, "bad-layer-numel-huge.txt", ckpt_meta_text(layer_0="9223372036854775807"))
    put(t, "bad-missing-layer.txt", ckpt_meta_text(drop=("layer.1",)))
    put(t, "bad-missing-rank.txt", ckpt_meta_text(world=3, drop=("rank.2",)))
    put(t, "bad-rank-size-small.txt", ckpt_meta_text(rank_0="10 1234abcd"))
    put(t, "bad-rank-size-huge.txt", ckpt_meta_text(rank_0="18446744073709551615 1234abcd"))
    put(t, "bad-rank-crc-long.txt", ckpt_meta_text(rank_0="1704 1234abcd9"))
    put(t, "bad-config-size-huge.txt", ckpt_meta_text(config="1099511627776 928b87eb"))
    put(t, "bad-data-incomplete.txt", ckpt_meta_text(drop=("data.crc32",)))
    put(t, "bad-world-zero.txt", ckpt_meta_text().replace("\nworld=1\n", "\nworld=0\n"))
    put(t, "bad-nul-byte.txt", ckpt_meta_text().replace("family=gpt2", "family=gpt2\0x"))
    put(t, "bad-empty-key.txt", ckpt_meta_text(extra=[("", "1")]))
    put(t, "bad-not-key-value.txt", ckpt_meta_text() + "no equals sign\n")
    put(t, "bad-empty.txt", "")


if __name__ == "__main__":
    config_seeds()
    safetensors_seeds()
    data_seeds()
    hf_config_seeds()
    hf_index_seeds()
    peft_config_seeds()
    tokenizer_seeds()
    ckpt_meta_seeds()
