#!/usr/bin/env python3
"""Outside check of zinc's Llama and Qwen3: an independent float64 PyTorch implementation of
Hugging Face's LlamaForCausalLM equations (RMSNorm, rotate_half RoPE with llama3
rope_scaling, grouped-query attention, SwiGLU, untied lm_head) or, with --model qwen3, of
Qwen3ForCausalLM's (the same with q_norm and k_norm: RMSNorm over head_dim of every query
and key head after the projection and before RoPE, an explicit head_dim other than
hidden / heads, rope_theta 1e6, tied embeddings) builds a tiny model, saves it as a sharded
Hugging Face directory (config.json, two shards, model.safetensors.index.json), writes an
llm.c Llama 3 token file (magic 20240801, version 7, uint32) and a DeepSpeed config (AdamW,
ZeRO stage 3, offload_optimizer cpu, csv_monitor for the losses at full precision), runs

    zinc train --init-from DIR --data tokens.bin --seq 32 --steps 3 --steps-per-print 1
               --dtype fp32 --deterministic --save-final out.safetensors --config ds.json

and compares zinc's three losses (within 1e-4) and its final weights, read from
out.safetensors under their Hugging Face names (within 1e-3), with three AdamW steps of its
own (torch.optim.AdamW's update, decay on 2-D tensors, written out here). --nvme DIR
trains a second time with the optimizer offloaded to NVMe (offload_optimizer nvme under
DIR) and requires its losses and final weights to equal the CPU offload's bit for bit.

    python3 scripts/llama_check.py --zinc build/zinc [--model llama|qwen3|mixtral|qwen3_moe]
                                   [--nvme DIR] [--keep DIR] [--fused] [--gas N]
                                   [--mpiexec "mpirun --oversubscribe" --ranks N]

--model mixtral and qwen3_moe build MixtralForCausalLM and Qwen3MoeForCausalLM (the sparse
MoE block: router, fp32 softmax, top-k, renormalized or not, SwiGLU experts; Qwen3-MoE with a
dense layer from mlp_only_layers and enough experts that some get no token in a step, which
the check requires) with output_router_logits: the step line's "| aux X" is compared with
transformers' load_balancing_loss_func, and the reference's gradient includes
router_aux_loss_coef x that loss; their parameters are offloaded too (offload_param cpu,
then nvme). --fused writes the experts in transformers 5's fused layout; --gas N and
--mpiexec/--ranks N split each step's rows into micro-batches or ranks, whose losses (the
load-balancing loss per micro-batch) the reference averages.

--lora trains PEFT-style LoRA adapters instead (r 4, lora_alpha 8; Qwen3-MoE with
use_rslora) on the attention, the router `gate` and every expert's projections (Mixtral's
w1,w2,w3; Qwen3-MoE's gate_proj,up_proj,down_proj, which also names its dense layer's MLP):
zinc starts from an adapter written here (--init-adapter; A and B random, so every expert's
delta counts from the first step), the base frozen, and its saved adapter (--save-adapter)
must hold exactly PEFT's names (base_model.model.<module>.lora_A.weight) with the values of
the reference's three AdamW steps on A and B, whose forward is the base's with each target
W + scale B A (PEFT's LoRA Linear, dropout 0). An expert that no token chose gets no
gradient there and still its AdamW step (weight decay).

Exit status 0 when both agree, 1 when not, 77 (ctest's skip) when torch is not installed.
Needs only python3-torch (Debian); no transformers, no safetensors package.
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("llama_check: skipped: python3-torch is not installed")
    sys.exit(77)

D = torch.float64
CFG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    # llama3 scaling with a short original context, so all three frequency bands occur
    "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
# Qwen3ForCausalLM: head_dim 24 (hidden / heads is 16), q/k norms, tied, theta from config
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
# MixtralForCausalLM: Mistral's attention (head_dim from hidden / heads), every block a sparse
# MoE of 4 experts, 2 per token (renormalized), the load-balancing loss on
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "sliding_window": None,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "output_router_logits": True,
    "router_aux_loss_coef": 0.05,
    "router_jitter_noise": 0.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
# Qwen3MoeForCausalLM: Qwen3's attention, layer 0 sparse with 64 experts, 2 per token, not
# renormalized (so with B T = 64 tokens several experts get no token in a step), layer 1
# dense (mlp_only_layers) of intermediate_size
QWEN3_MOE = dict(QWEN3, **{
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "tie_word_embeddings": False,
    "num_experts": 64,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "norm_topk_prob": False,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [1],
    "output_router_logits": True,
    "router_aux_loss_coef": 0.1,
})
MODELS = {"llama": CFG, "qwen3": QWEN3, "mixtral": MIXTRAL, "qwen3_moe": QWEN3_MOE}
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.95), 1e-6, 0.1
B, T, STEPS = 2, 32, 3


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def qk_norm(c):
    return c["model_type"] in ("qwen3", "qwen3_moe")


def experts(c):
    return c.get("num_local_experts") or c.get("num_experts") or 0


def is_sparse(c, n):
    """transformers' rule: a sparse block unless in mlp_only_layers, every
    decoder_sparse_step-th layer"""
    return experts(c) > 0 and n not in c.get("mlp_only_layers", []) and \
        (n + 1) % c.get("decoder_sparse_step", 1) == 0


def moe_names(c, n):
    """(module prefix, router, [(gate, up, down) per expert]) of sparse block n"""
    if c["model_type"] == "mixtral":
        m, g, u, d = "model.layers.%d.block_sparse_moe." % n, "w1", "w3", "w2"
    else:
        m, g, u, d = "model.layers.%d.mlp." % n, "gate_proj", "up_proj", "down_proj"
    return m + "gate.weight", [tuple(m + "experts.%d.%s.weight" % (e, x) for x in (g, u, d))
                               for e in range(experts(c))]


def names(c):
    """HF tensor names and shapes in checkpoint order."""
    H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    IE = c.get("moe_intermediate_size", I)
    Q = c["num_attention_heads"] * head_dim(c)
    KV = c["num_key_value_heads"] * head_dim(c)
    out = [("model.embed_tokens.weight", (V, H))]
    for n in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % n
        out += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (Q, H)),
                (p + "self_attn.k_proj.weight", (KV, H)), (p + "self_attn.v_proj.weight", (KV, H)),
                (p + "self_attn.o_proj.weight", (H, Q))]
        if qk_norm(c):
            out += [(p + "self_attn.q_norm.weight", (head_dim(c),)),
                    (p + "self_attn.k_norm.weight", (head_dim(c),))]
        out.append((p + "post_attention_layernorm.weight", (H,)))
        if is_sparse(c, n):
            router, ex = moe_names(c, n)
            out.append((router, (experts(c), H)))
            for g, u, d in ex:
                out += [(g, (IE, H)), (u, (IE, H)), (d, (H, IE))]
            continue
        out += [(p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                (p + "mlp.down_proj.weight", (H, I))]
    out.append(("model.norm.weight", (H,)))
    return out if c["tie_word_embeddings"] else out + [("lm_head.weight", (V, H))]


def fused_layout(c, params):
    """The checkpoint's tensors in order, each sparse layer's experts as transformers 5's two
    fused stacks (gate rows then up rows per expert) in place of their own tensors."""
    out, done = [], set()
    for name, _ in names(c):
        if ".experts." not in name:
            out.append((name, params[name]))
            continue
        n = int(name.split(".")[2])
        if n in done:
            continue
        done.add(n)
        _, ex = moe_names(c, n)
        p = "model.layers.%d.mlp.experts." % n
        out.append((p + "gate_up_proj", torch.stack([torch.cat((params[g], params[u]))
                                                     for g, u, _ in ex])))
        out.append((p + "down_proj", torch.stack([params[d] for _, _, d in ex])))
    return out


def inv_freq(c):
    """transformers' default RoPE frequencies and the llama3 scaling, in float32 as it does."""
    dim, base = head_dim(c), c["rope_theta"]
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = c.get("rope_scaling")
    if s:
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        lo_wavelen, hi_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / f
        g = torch.where(wavelen > lo_wavelen, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * g / factor + smooth * g
        mid = ~(wavelen < hi_wavelen) * ~(wavelen > lo_wavelen)
        f = torch.where(mid, smoothed, g)
    return f.to(D)


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def sparse_moe(p, c, n, h, routers, unused):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock on h [b, t, H]: router logits, softmax,
    the top k (renormalized when the config says), each expert a SwiGLU MLP, the weighted sum.
    Written densely (each expert on every token, weight 0 where not chosen), so an expert no
    token chose gets an exact zero gradient. routers collects the logits, unused the count of
    experts that no token chose."""
    router, ex = moe_names(c, n)
    logits = h @ p[router].T
    probs = torch.softmax(logits, dim=-1)
    w, sel = torch.topk(probs, c["num_experts_per_tok"], dim=-1)
    if c["model_type"] == "mixtral" or c["norm_topk_prob"]:
        w = w / w.sum(dim=-1, keepdim=True)
    dense = torch.zeros_like(probs).scatter(-1, sel, w)
    out = torch.zeros_like(h)
    for e, (g, u, d) in enumerate(ex):
        y = (torch.nn.functional.silu(h @ p[g].T) * (h @ p[u].T)) @ p[d].T
        out = out + dense[..., e:e + 1] * y
    routers.append(logits.reshape(-1, logits.shape[-1]))
    unused.append(experts(c) - len(torch.unique(sel)))
    return out


def load_balancing(routers, E, K):
    """transformers' load_balancing_loss_func without an attention mask: over the
    concatenated router logits of every sparse layer, one softmax, the top-k one-hot mask;
    E x sum of (share of the slots per k and expert) x (mean probability per expert)."""
    probs = torch.softmax(torch.cat(routers, dim=0), dim=-1)
    _, sel = torch.topk(probs, K, dim=-1)
    mask = torch.nn.functional.one_hot(sel, E).to(D)
    return (mask.mean(dim=0) * probs.mean(dim=0)[None, :]).sum() * E


def forward(p, c, tokens, targets, unused=None):
    """Mean cross-entropy of LlamaForCausalLM on tokens [B, T] against targets [B, T]; with
    experts and output_router_logits, (cross-entropy, the load-balancing loss)."""
    NH, KV, Dh = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    routers, unused = [], [] if unused is None else unused
    eps = c["rms_norm_eps"]
    b, t = tokens.shape
    x = p["model.embed_tokens.weight"][tokens]
    ang = torch.arange(t, dtype=D)[:, None] * inv_freq(c)[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((t, t), float("-inf"), dtype=D).triu(1)
    for n in range(c["num_hidden_layers"]):
        q_ = "model.layers.%d." % n
        h = rmsnorm(x, p[q_ + "input_layernorm.weight"], eps)
        q = (h @ p[q_ + "self_attn.q_proj.weight"].T).view(b, t, NH, Dh)
        k = (h @ p[q_ + "self_attn.k_proj.weight"].T).view(b, t, KV, Dh)
        if qk_norm(c):  # Qwen3Attention: per head, before RoPE
            q = rmsnorm(q, p[q_ + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, p[q_ + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = (h @ p[q_ + "self_attn.v_proj.weight"].T).view(b, t, KV, Dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KV, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // KV, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(Dh) + mask, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(b, t, NH * Dh)
        x = x + o @ p[q_ + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, p[q_ + "post_attention_layernorm.weight"], eps)
        if is_sparse(c, n):
            x = x + sparse_moe(p, c, n, h, routers, unused)
            continue
        g = torch.nn.functional.silu(h @ p[q_ + "mlp.gate_proj.weight"].T)
        u = h @ p[q_ + "mlp.up_proj.weight"].T
        x = x + (g * u) @ p[q_ + "mlp.down_proj.weight"].T
    h = rmsnorm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]
    logits = h @ head.T
    ce = torch.nn.functional.cross_entropy(logits.reshape(b * t, -1), targets.reshape(-1))
    if experts(c) and c.get("output_router_logits"):
        return ce, load_balancing(routers, experts(c), c["num_experts_per_tok"])
    return ce


LORA_R, LORA_ALPHA = 4, 8.0
LORA_TARGETS = {"mixtral": ["q_proj", "gate", "w1", "w2", "w3"],
                "qwen3_moe": ["v_proj", "gate", "gate_proj", "up_proj", "down_proj"]}


def lora_modules(c, model):
    """(module path, out, in) of every 2-D weight whose module name ends in a target, as
    PEFT's target_modules matches them (every expert's projection its own module)"""
    out = []
    for name, shape in names(c):
        mod = name[:-len(".weight")]
        if len(shape) == 2 and mod.split(".")[-1] in LORA_TARGETS[model] and \
                not name.startswith("model.embed_tokens"):
            out.append((mod, shape[0], shape[1]))
    return out


def lora_scale(model):
    return LORA_ALPHA / math.sqrt(LORA_R) if model == "qwen3_moe" else LORA_ALPHA / LORA_R


def lora_merged(base, adapters, mods, scale):
    """the base's weights with W + scale B A on every adapted module (differentiable in the
    adapters): PEFT's LoRA Linear x W^T + scale x A^T B^T, written as one weight"""
    p = dict(base)
    for mod, _, _ in mods:
        a = adapters["base_model.model.%s.lora_A.weight" % mod]
        b = adapters["base_model.model.%s.lora_B.weight" % mod]
        p[mod + ".weight"] = base[mod + ".weight"] + scale * (b @ a)
    return p


def adamw(p, grads, state, step):
    """torch.optim.AdamW's update; weight decay on 2-D tensors only (zinc's rule)."""
    b1, b2 = BETAS
    for name, w in p.items():
        g = grads[name]
        m, v = state.setdefault(name, (torch.zeros_like(w), torch.zeros_like(w)))
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        if w.dim() == 2:
            w.mul_(1 - LR * WD)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(EPS)
        w.addcdiv_(m, denom, value=-LR / (1 - b1 ** step))


def st_write(path, tensors):
    """A safetensors file of F32 tensors (name -> float64 tensor), in the given order."""
    header, blobs, off = {}, [], 0
    for name, w in tensors:
        data = w.to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return off


def st_entries(path):
    """name -> (dtype, shape, bytes) of every tensor of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name != "__metadata__":
            a, b = e["data_offsets"]
            out[name] = (e["dtype"], e["shape"], data[a:b])
    return out


def st_read(path):
    """name -> float64 tensor of a safetensors file of F32 tensors."""
    out = {}
    for name, (dtype, shape, raw) in st_entries(path).items():
        assert dtype == "F32", (name, dtype)
        out[name] = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape).to(D)
    return out


def run_zinc(a, work, model_dir, ds_name, out_name, job):
    """zinc train on the model; its csv losses and final weights (None, None: it failed).
    With --lora: the adapters zinc saved (out_name a directory)."""
    cmd = [os.path.abspath(a.zinc), "train", "--init-from", model_dir, "--data", "tokens.bin",
           "--seq", str(T), "--steps", str(STEPS), "--steps-per-print", "1", "--dtype", "fp32",
           "--deterministic", "--config", ds_name]
    if a.lora:
        cmd += ["--init-adapter", "adapter_init", "--save-adapter", out_name]
        out_name = os.path.join(out_name, "adapter_model.safetensors")
    else:
        cmd += ["--save-final", out_name]
    if a.mpiexec:  # N ranks of B / N rows each: the same windows per step
        cmd = a.mpiexec.split() + ["-np", str(a.ranks)] + cmd
    print("llama_check: " + " ".join(cmd[1:]))
    r = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    sys.stdout.write(r.stdout)
    if r.returncode:
        print("llama_check: zinc train exited with %d" % r.returncode)
        return None, None
    with open(os.path.join(work, "csv", job, "Train_Samples_train_loss.csv")) as f:
        loss = [float(line.split(",")[1]) for line in f.read().split("\n")[1:] if line]
    # the step lines' load-balancing loss ("| aux X"), for a model with one
    a.aux = [float(m) for m in re.findall(r"^step \d+/\d+ \| loss \S+ \| aux (\S+)", r.stdout,
                                           re.M)]
    return loss, st_read(os.path.join(work, out_name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zinc", default="build/zinc")
    ap.add_argument("--keep", help="work in this directory and keep it")
    ap.add_argument("--model", choices=tuple(MODELS), default="llama")
    ap.add_argument("--fused", action="store_true", help="write the experts as "
                    "transformers 5 stores them: mlp.experts.gate_up_proj [E, 2I, H] and "
                    "mlp.experts.down_proj [E, H, I] per sparse layer")
    ap.add_argument("--mpiexec", help="run zinc under this launcher (\"mpirun "
                    "--oversubscribe\") with --ranks ranks of B / ranks rows each")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--gas", type=int, default=1, help="gradient accumulation steps "
                    "(micro-batches of B / ranks / gas rows)")
    ap.add_argument("--nvme", help="also train with offload_optimizer nvme under this "
                    "directory: bit for bit the CPU offload's")
    ap.add_argument("--lora", action="store_true", help="train LoRA adapters on the "
                    "attention, the router and every expert's projections (mixtral, "
                    "qwen3_moe), the base frozen")
    a = ap.parse_args()
    if a.lora and a.model not in LORA_TARGETS:
        ap.error("--lora: --model mixtral or qwen3_moe")
    work = a.keep or tempfile.mkdtemp(prefix="zn_llama_check_")
    os.makedirs(work, exist_ok=True)
    c = MODELS[a.model]
    gen = torch.Generator().manual_seed(1234)
    params = {}
    for name, shape in names(c):
        if len(shape) == 1:  # norms around 1
            params[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=D)
        else:
            params[name] = 0.05 * torch.randn(shape, generator=gen, dtype=D)
        # what zinc reads: the F32 values
        params[name] = params[name].to(torch.float32).to(D)

    # sharded Hugging Face directory: two shards split after layer 0 and the index
    model_dir = os.path.join(work, "model")
    os.makedirs(model_dir, exist_ok=True)
    stored = fused_layout(c, params) if a.fused else [(n, params[n]) for n, _ in names(c)]
    order = [n for n, _ in stored]
    cut = order.index("model.layers.1.input_layernorm.weight")
    shards = [stored[:cut], stored[cut:]]
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        total += st_write(os.path.join(model_dir, fname), part)
        weight_map.update({n: fname for n, _ in part})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)

    # llm.c Llama 3 token file: 256 int32 header (magic, version, count), uint32 tokens
    windows = STEPS * B + 2
    n_tok = windows * T + 1
    tokens = torch.randint(0, c["vocab_size"], (n_tok,), generator=gen, dtype=torch.int64)
    tok_path = os.path.join(work, "tokens.bin")
    with open(tok_path, "wb") as f:
        f.write(struct.pack("<256i", *([20240801, 7, n_tok] + [0] * 253)))
        f.write(struct.pack("<%dI" % n_tok, *tokens.tolist()))

    mods = lora_modules(c, a.model) if a.lora else []
    scale = lora_scale(a.model)
    adapters = {}
    for mod, o, i in mods:  # PEFT's names; A and B random (B is zero in PEFT's init)
        adapters["base_model.model.%s.lora_A.weight" % mod] = \
            (0.1 * torch.randn((LORA_R, i), generator=gen, dtype=D)).to(torch.float32).to(D)
        adapters["base_model.model.%s.lora_B.weight" % mod] = \
            (0.1 * torch.randn((o, LORA_R), generator=gen, dtype=D)).to(torch.float32).to(D)
    if a.lora:
        init_dir = os.path.join(work, "adapter_init")
        os.makedirs(init_dir, exist_ok=True)
        st_write(os.path.join(init_dir, "adapter_model.safetensors"), sorted(adapters.items()))
        with open(os.path.join(init_dir, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA_R,
                       "lora_alpha": LORA_ALPHA, "use_rslora": a.model == "qwen3_moe",
                       "target_modules": LORA_TARGETS[a.model], "lora_dropout": 0.0,
                       "bias": "none", "fan_in_fan_out": False,
                       "base_model_name_or_path": None}, f, indent=2)

    csv_dir = os.path.join(work, "csv")
    ranks = a.ranks if a.mpiexec else 1
    groups = ranks * a.gas  # micro-batches of a step over all ranks
    assert B % groups == 0
    ds = {"train_micro_batch_size_per_gpu": B // groups, "gradient_accumulation_steps": a.gas,
          "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                    "weight_decay": WD}},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
          "csv_monitor": {"enabled": True, "output_path": csv_dir, "job_name": "check"}}
    moe = experts(c) > 0
    if moe:  # the experts are parameters as any other: their shards offloaded too
        ds["zero_optimization"]["offload_param"] = {"device": "cpu"}
    with open(os.path.join(work, "ds.json"), "w") as f:
        json.dump(ds, f, indent=2)

    out_name = "adapter_out" if a.lora else "out.safetensors"
    zinc_loss, out = run_zinc(a, work, model_dir, "ds.json", out_name, "check")
    if zinc_loss is None:
        return 1
    if a.nvme:  # the same run with the optimizer state on NVMe: bit for bit
        os.makedirs(a.nvme, exist_ok=True)
        ds["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": a.nvme}
        if moe:
            ds["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": a.nvme}
        ds["csv_monitor"]["job_name"] = "nvme"
        with open(os.path.join(work, "ds_nvme.json"), "w") as f:
            json.dump(ds, f, indent=2)
        nvme_name = "adapter_nvme" if a.lora else "out_nvme.safetensors"
        nvme_loss, _ = run_zinc(a, work, model_dir, "ds_nvme.json", nvme_name, "nvme")
        leaf = ["adapter_model.safetensors"] if a.lora else []
        with open(os.path.join(work, out_name, *leaf), "rb") as f1, \
                open(os.path.join(work, nvme_name, *leaf), "rb") as f2:
            same = f1.read() == f2.read()
        print("llama_check: offload_optimizer nvme: losses %s, final weights %s" %
              ("equal" if nvme_loss == zinc_loss else "DIFFER",
               "equal byte for byte" if same else "DIFFER"))
        if nvme_loss != zinc_loss or not same:
            return 1

    # the reference: the same windows (consecutive, no shuffle), three AdamW steps
    state, ref_loss, idle, ref_aux = {}, [], 0, []
    zinc_aux = a.aux
    if a.lora:  # the adapters train, the base is a constant
        base, params = params, adapters
    initial = {n: w.clone() for n, w in params.items()}
    for s in range(STEPS):
        idx = [(s * B + b) * T for b in range(B)]
        x = torch.stack([tokens[i:i + T] for i in idx])
        y = torch.stack([tokens[i + 1:i + T + 1] for i in idx])
        leaves = {n: w.clone().requires_grad_(True) for n, w in params.items()}
        model_p = lora_merged(base, leaves, mods, scale) if a.lora else leaves
        unused = []
        # each micro-batch (of each rank) a forward of its own, the losses averaged over
        # them as DDP and gradient accumulation average gradients (the load-balancing loss
        # is per micro-batch); with B = 2 rows and 2 groups each group is one row
        parts = [forward(model_p, c, x[r::groups], y[r::groups], unused)
                 for r in range(groups)]
        if isinstance(parts[0], tuple):  # MixtralForCausalLM.forward: loss += coef x aux
            aux = sum(p[1] for p in parts) / groups
            loss = sum(p[0] for p in parts) / groups
            ref_aux.append(aux.item())
            (loss + c["router_aux_loss_coef"] * aux).backward()
        else:
            loss = sum(parts) / groups
            loss.backward()
        if unused:
            print("step %d: experts that no token chose, per sparse layer (and rank): %s" %
                  (s + 1, unused))
            idle = idle + sum(unused)
        ref_loss.append(loss.item())
        adamw(params, {n: w.grad if w.grad is not None else torch.zeros_like(w)
                       for n, w in leaves.items()}, state, s + 1)

    ok = len(zinc_loss) == STEPS and sorted(out) == sorted(params)
    loss_diff = max(abs(u - v) for u, v in zip(zinc_loss, ref_loss)) if ok else float("inf")
    w_diff, w_name = 0.0, ""
    moved = max((params[n] - initial[n]).abs().max().item() for n in params)
    for n in params if ok else []:
        d = (out[n] - params[n]).abs().max().item()
        if d > w_diff:
            w_diff, w_name = d, n
    for s in range(min(len(zinc_loss), STEPS)):
        print("step %d: zinc loss %.7f, float64 reference %.7f" % (s + 1, zinc_loss[s], ref_loss[s]))
    if ref_aux:  # the step line's aux: the load-balancing loss before its coefficient
        ok = ok and len(zinc_aux) == STEPS
        aux_diff = max(abs(u - v) for u, v in zip(zinc_aux, ref_aux)) if ok else float("inf")
        for s in range(min(len(zinc_aux), STEPS)):
            print("step %d: zinc aux %.7f, float64 load_balancing_loss_func %.7f" %
                  (s + 1, zinc_aux[s], ref_aux[s]))
        print("llama_check: max aux difference %.3g (limit 2e-4: the step line prints 4 decimals)" % aux_diff)
        ok = ok and aux_diff <= 2e-4
    print("llama_check: max loss difference %.3g (limit 1e-4), max weight difference %.3g in %s "
          "(limit 1e-3; the weights moved up to %.3g)" % (loss_diff, w_diff, w_name, moved))
    good = ok and loss_diff <= 1e-4 and w_diff <= 1e-3
    if a.model == "qwen3_moe" and not idle:  # the case the check is for did not occur
        print("llama_check: no expert went without a token: the check of idle experts "
              "did not happen")
        good = False
    print("llama_check: %s" % ("PASS" if good else "FAIL"))
    if not a.keep:
        subprocess.run(["rm", "-rf", work])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
