#!/usr/bin/env python3
"""Outside check of zinc's LoRA (docs/lora.md) with an independent float64 PyTorch model.

    python3 scripts/lora_check.py --zinc build/zinc [--family llama|gpt2] [--keep DIR]

Builds a tiny model with random weights, its own float64 forward written here from the
model's definition (not from zinc's code): Llama (RMSNorm, rotate_half RoPE, grouped-query
attention, SwiGLU, untied lm_head) with a PEFT LoRA adapter (r 4, alpha 8) on q_proj and
v_proj, or GPT-2 with one on c_attn and c_fc; A and B both random. Writes them as a Hugging
Face directory and a PEFT adapter directory (safetensors written by hand: no zinc code),
trains the adapter 3 AdamW steps with torch.optim.AdamW on consecutive windows of a random
token file, then runs

    zinc train --init-from DIR --init-adapter ADIR --lora-r 4 --lora-alpha 8
               --lora-targets q_proj,v_proj ... --save-adapter OUT

on the same file and compares: each step's loss within 1e-4, the adapters after the 3
steps within 1e-3. Prints "ok: ..." and exits 0, or prints the first difference and exits
1; exits 77 when torch is not installed (the ctest skips). Needs python3-torch (Debian).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from array import array

try:
    import torch
except ImportError:
    print("lora_check: no torch (install python3-torch): skipped")
    sys.exit(77)

torch.set_default_dtype(torch.float64)
L, H, C, V, NPOS = 2, 4, 32, 96, 32
KV, HD, I = 2, 8, 48  # Llama: key/value heads, head_dim, intermediate size
B, T, STEPS = 2, 16, 3
R, ALPHA = 4, 8.0
TARGETS = ["attn.c_attn", "mlp.c_fc"]
LLAMA_TARGETS = ["self_attn.q_proj", "self_attn.v_proj"]
LR, WD, BETAS, EPS = 1e-2, 0.1, (0.9, 0.999), 1e-8


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = array("f", [float(x) for x in t.reshape(-1).tolist()]).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit("lora_check: %s is %s, expected F32" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        a = array("f")
        a.frombytes(data[8 + n + b:8 + n + e])
        out[name] = torch.tensor(list(a)).reshape(t["shape"])
    return out


def f32(t):
    """the value after a round trip through an F32 file"""
    return t.to(torch.float32).to(torch.float64)


def make_weights(g):
    W = {"transformer.wte.weight": torch.randn(V, C, generator=g) * 0.02,
         "transformer.wpe.weight": torch.randn(NPOS, C, generator=g) * 0.01,
         "transformer.ln_f.weight": 1 + torch.randn(C, generator=g) * 0.1,
         "transformer.ln_f.bias": torch.randn(C, generator=g) * 0.1}
    for l in range(L):
        p = "transformer.h.%d." % l
        for ln in ("ln_1", "ln_2"):
            W[p + ln + ".weight"] = 1 + torch.randn(C, generator=g) * 0.1
            W[p + ln + ".bias"] = torch.randn(C, generator=g) * 0.1
        # Conv1D: weight [in, out]
        for mod, i, o in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C),
                          ("mlp.c_fc", C, 4 * C), ("mlp.c_proj", 4 * C, C)):
            W[p + mod + ".weight"] = torch.randn(i, o, generator=g) * 0.05
            W[p + mod + ".bias"] = torch.randn(o, generator=g) * 0.02
    return {k: f32(v) for k, v in W.items()}


def make_adapter(g):
    A = {}
    for l in range(L):
        for mod in TARGETS:
            i, o = (C, 3 * C) if mod == "attn.c_attn" else (C, 4 * C)
            name = "base_model.model.transformer.h.%d.%s" % (l, mod)
            bound = 1 / math.sqrt(i)
            A[name + ".lora_A.weight"] = f32((torch.rand(R, i, generator=g) * 2 - 1) * bound)
            A[name + ".lora_B.weight"] = f32(torch.randn(o, R, generator=g) * 0.05)
    return A


def make_llama(g):
    Q, K = H * HD, KV * HD
    W = {"model.embed_tokens.weight": torch.randn(V, C, generator=g) * 0.05,
         "model.norm.weight": 1 + torch.randn(C, generator=g) * 0.1,
         "lm_head.weight": torch.randn(V, C, generator=g) * 0.05}
    shapes = {"self_attn.q_proj": (Q, C), "self_attn.k_proj": (K, C),
              "self_attn.v_proj": (K, C), "self_attn.o_proj": (C, Q),
              "mlp.gate_proj": (I, C), "mlp.up_proj": (I, C), "mlp.down_proj": (C, I)}
    for l in range(L):
        p = "model.layers.%d." % l
        W[p + "input_layernorm.weight"] = 1 + torch.randn(C, generator=g) * 0.1
        W[p + "post_attention_layernorm.weight"] = 1 + torch.randn(C, generator=g) * 0.1
        for mod, (o, i) in shapes.items():  # nn.Linear: weight [out, in]
            W[p + mod + ".weight"] = torch.randn(o, i, generator=g) / math.sqrt(i)
    A = {}
    for l in range(L):
        for mod in LLAMA_TARGETS:
            o, i = shapes[mod]
            name = "base_model.model.model.layers.%d.%s" % (l, mod)
            A[name + ".lora_A.weight"] = f32((torch.rand(R, i, generator=g) * 2 - 1) /
                                             math.sqrt(i))
            A[name + ".lora_B.weight"] = f32(torch.randn(o, R, generator=g) * 0.05)
    return {k: f32(v) for k, v in W.items()}, A


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w


def rope(x, pos):
    """rotate_half RoPE, theta 10000, on x [B, heads, T, HD]"""
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2) / HD))
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def llama_forward(W, ad, tok, tgt):
    scale = ALPHA / R

    def lin(x, mod):
        y = x @ W[mod + ".weight"].T
        name = "base_model.model." + mod
        if name + ".lora_A.weight" in ad:
            y = y + scale * (x @ ad[name + ".lora_A.weight"].T) @ ad[name + ".lora_B.weight"].T
        return y

    Bn, Tn = tok.shape
    pos = torch.arange(Tn).to(torch.float64)
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    x = W["model.embed_tokens.weight"][tok]
    for l in range(L):
        p = "model.layers.%d." % l
        h = rmsnorm(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").view(Bn, Tn, H, HD).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(Bn, Tn, KV, HD).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(Bn, Tn, KV, HD).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, H * HD)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"])
        gate = lin(h, p + "mlp.gate_proj")
        x = x + lin(gate * torch.sigmoid(gate) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rmsnorm(x, W["model.norm.weight"])
    logits = x @ W["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(W, ad, tok, tgt):
    scale = ALPHA / R

    def conv1d(x, l, mod):
        y = x @ W["transformer.h.%d.%s.weight" % (l, mod)] + W["transformer.h.%d.%s.bias" % (l, mod)]
        name = "base_model.model.transformer.h.%d.%s" % (l, mod)
        if name + ".lora_A.weight" in ad:
            y = y + scale * (x @ ad[name + ".lora_A.weight"].T) @ ad[name + ".lora_B.weight"].T
        return y

    Bn, Tn = tok.shape
    hd = C // H
    x = W["transformer.wte.weight"][tok] + W["transformer.wpe.weight"][:Tn]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for l in range(L):
        p = "transformer.h.%d." % l
        h = layernorm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"])
        q, k, v = conv1d(h, l, "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(Bn, Tn, H, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + conv1d(y, l, "attn.c_proj")
        h = layernorm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"])
        x = x + conv1d(gelu(conv1d(h, l, "mlp.c_fc")), l, "mlp.c_proj")
    x = layernorm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"])
    logits = x @ W["transformer.wte.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zinc", required=True)
    ap.add_argument("--family", default="llama", choices=["llama", "gpt2"])
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="zn_lora_check_")
    os.makedirs(work, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    llama = a.family == "llama"
    if llama:
        W, ad = make_llama(g)
    else:
        W = make_weights(g)
        ad = make_adapter(g)
    fwd = llama_forward if llama else forward
    targets = "q_proj,v_proj" if llama else "c_attn,c_fc"
    tokens = torch.randint(0, V, (STEPS * B * T + 1,), generator=g)

    base, adir, out = (os.path.join(work, d) for d in ("base", "adapter", "out"))
    for d in (base, adir):
        os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(base, "model.safetensors"), W)
    if llama:
        config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                  "hidden_size": C, "intermediate_size": I, "num_hidden_layers": L,
                  "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
                  "vocab_size": V, "max_position_embeddings": NPOS, "rms_norm_eps": 1e-5,
                  "rope_theta": 10000.0, "hidden_act": "silu", "attention_bias": False,
                  "mlp_bias": False, "tie_word_embeddings": False}
    else:
        config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": C,
                  "n_head": H, "n_layer": L, "n_positions": NPOS, "vocab_size": V,
                  "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(adir, "adapter_model.safetensors"), ad)
    with open(os.path.join(adir, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": R, "lora_alpha": ALPHA, "lora_dropout": 0.0,
                   "target_modules": targets.split(","), "fan_in_fan_out": not llama,
                   "use_rslora": False, "bias": "none", "task_type": "CAUSAL_LM"}, f,
                  indent=2)
    with open(os.path.join(work, "data.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(array("H", tokens.tolist()).tobytes())

    # the reference: torch.optim.AdamW on the adapter, float64
    params = {k: v.clone().requires_grad_(True) for k, v in ad.items()}
    opt = torch.optim.AdamW(list(params.values()), lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WD)
    ref_loss = []
    for s in range(STEPS):
        win = [tokens[(s * B + b) * T:(s * B + b) * T + T + 1] for b in range(B)]
        tok = torch.stack([w[:T] for w in win])
        tgt = torch.stack([w[1:] for w in win])
        opt.zero_grad()
        loss = fwd(W, params, tok, tgt)
        loss.backward()
        opt.step()
        ref_loss.append(loss.item())

    csv = os.path.join(work, "csv")
    cmd = [a.zinc, "train", "--init-from", base, "--init-adapter", adir, "--lora-r", str(R),
           "--lora-alpha", str(ALPHA), "--lora-targets", targets, "--data",
           os.path.join(work, "data.bin"), "--steps", str(STEPS), "--micro-batch", str(B),
           "--seq", str(T), "--lr", str(LR), "--weight-decay", str(WD), "--eps", str(EPS),
           "--betas", "%g,%g" % BETAS, "--lr-schedule", "none", "--csv-monitor",
           "--csv-output-path", csv, "--csv-job-name", "lora", "--save-adapter", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        print(r.stdout)
        print("lora_check: zinc train failed (%d): %s" % (r.returncode, " ".join(cmd)))
        return 1
    with open(os.path.join(csv, "lora", "Train_Samples_train_loss.csv")) as f:
        got_loss = [float(line.split(",")[1]) for line in f.read().split("\n")[1:] if line]
    bad = 0
    for s in range(STEPS):
        d = abs(got_loss[s] - ref_loss[s])
        print("step %d: loss zinc %.7f torch %.7f (diff %.2e)" % (s + 1, got_loss[s],
                                                                   ref_loss[s], d))
        bad |= not d <= 1e-4
    got = read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    if sorted(got) != sorted(params):
        print("lora_check: zinc saved %s, expected %s" % (sorted(got), sorted(params)))
        return 1
    worst = max((got[k] - params[k].detach()).abs().max().item() for k in got)
    moved = max((params[k].detach() - ad[k]).abs().max().item() for k in got)
    print("adapters: largest difference %.2e (the 3 steps moved them up to %.2e)" %
          (worst, moved))
    bad |= not worst <= 1e-3
    if not a.keep:
        shutil.rmtree(work)
    if bad:
        print("lora_check: FAILED")
        return 1
    print("ok: losses within 1e-4, adapters within 1e-3 of torch float64 (%s)" % a.family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
