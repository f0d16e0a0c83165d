#!/usr/bin/env python3
"""Outside check of zinc's QLoRA: LoRA adapters trained on a 4-bit NF4 base against an
independent float64 PyTorch trainer on the dequantized base.

It builds llama_check.py's tiny LlamaForCausalLM, has zinc quantize it once
(`--quantize-base nf4 --steps 0 --save-quantized q`, a bitsandbytes checkpoint) and write
rank-4 adapters on all seven linears (`--steps 0 --save-adapter init`), gives lora_B
random values (PEFT starts it at zero, which would leave lora_A without a gradient at the
first step), then runs

    zinc train --init-from q --init-adapter init --data tokens.bin --seq 32 --steps 3
               --dtype fp32 --deterministic --save-adapter out --config ds.json

The reference reads q's packed codes, absmax and quant_map itself and dequantizes them as
bitsandbytes' dequantize_4bit does (code x absmax in fp32, the high nibble first), then
trains the same adapters for three AdamW steps in float64 (W + (alpha / r) B A for every
adapted linear, weight decay on 2-D tensors). zinc's three losses must agree within 1e-4
and its adapters within 1e-3.

    python3 scripts/qlora_check.py --zinc build/zinc [--keep DIR]

Exit status 0 when both agree, 1 when not, 77 (ctest's skip) when torch is not installed.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_check as lc  # noqa: E402  (exits 77 without torch)

torch = lc.torch
D = lc.D
R, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def f32(raw, shape):
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape).to(D)


def dequantized_base(path):
    """The base as bitsandbytes' dequantize_4bit gives it, in float64."""
    t = lc.st_entries(path)
    out = {}
    for name, (dtype, shape, raw) in t.items():
        if dtype == "F32" and ".weight." not in name:
            out[name] = f32(raw, shape)
    for name in list(t):
        key = name + ".quant_state.bitsandbytes__nf4"
        if key not in t:
            continue
        qs = json.loads(bytes(t[key][2]).decode())
        assert qs["quant_type"] == "nf4" and qs["blocksize"] == 64, qs
        codes = torch.frombuffer(bytearray(t[name][2]), dtype=torch.uint8).to(torch.int64)
        q = torch.stack((codes >> 4, codes & 15), dim=1).reshape(-1)  # high nibble first
        qmap = f32(t[name + ".quant_map"][2], [16]).to(torch.float32)
        absmax = f32(t[name + ".absmax"][2], [-1]).to(torch.float32)
        n = 1
        for s in qs["shape"]:
            n *= s
        vals = qmap[q[:n]] * absmax.repeat_interleave(64)[:n]  # fp32 product
        out[name] = vals.reshape(qs["shape"]).to(D)
    return out


def zinc(a, work, *args):
    cmd = [os.path.abspath(a.zinc), "train"] + list(args)
    print("qlora_check: " + " ".join(cmd[1:]))
    r = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    sys.stdout.write(r.stdout)
    if r.returncode:
        print("qlora_check: zinc train exited with %d" % r.returncode)
    return r.returncode == 0


def adapter_names(c):
    out = []
    for n in range(c["num_hidden_layers"]):
        for m in TARGETS:
            sub = "self_attn" if m.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            out.append("model.layers.%d.%s.%s" % (n, sub, m))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zinc", default="build/zinc")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="zn_qlora_check_")
    os.makedirs(work, exist_ok=True)
    c = lc.CFG
    gen = torch.Generator().manual_seed(4321)
    params = {}
    for name, shape in lc.names(c):
        w = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=D) if len(shape) == 1 else \
            0.05 * torch.randn(shape, generator=gen, dtype=D)
        params[name] = w.to(torch.float32).to(D)
    model_dir = os.path.join(work, "model")
    os.makedirs(model_dir, exist_ok=True)
    lc.st_write(os.path.join(model_dir, "model.safetensors"),
                [(n, params[n]) for n, _ in lc.names(c)])
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    windows = lc.STEPS * lc.B + 2
    n_tok = windows * lc.T + 1
    tokens = torch.randint(0, c["vocab_size"], (n_tok,), generator=gen, dtype=torch.int64)
    with open(os.path.join(work, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240801, 7, n_tok] + [0] * 253)))
        f.write(struct.pack("<%dI" % n_tok, *tokens.tolist()))
    csv_dir = os.path.join(work, "csv")
    ds = {"train_micro_batch_size_per_gpu": lc.B, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": lc.LR, "betas": list(lc.BETAS),
                                                    "eps": lc.EPS, "weight_decay": lc.WD}},
          "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
          "csv_monitor": {"enabled": True, "output_path": csv_dir, "job_name": "qlora"}}
    with open(os.path.join(work, "ds.json"), "w") as f:
        json.dump(ds, f, indent=2)
    common = ["--data", "tokens.bin", "--seq", str(lc.T), "--dtype", "fp32", "--deterministic",
              "--config", "ds.json"]
    lora = ["--lora-r", str(R), "--lora-alpha", str(ALPHA), "--lora-targets", ",".join(TARGETS)]
    if not (zinc(a, work, "--init-from", "model", "--quantize-base", "nf4", *lora, *common,
                 "--steps", "0", "--save-quantized", "q") and
            zinc(a, work, "--init-from", "model", *lora, *common, "--steps", "0",
                 "--save-adapter", "init")):
        return 1
    # lora_B random (PEFT's zero start would leave lora_A's first gradient zero)
    ad_path = os.path.join(work, "init", "adapter_model.safetensors")
    ad = {n: f32(raw, shape) for n, (dt, shape, raw) in lc.st_entries(ad_path).items()}
    for n in sorted(ad):
        if n.endswith("lora_B.weight"):
            ad[n] = (0.05 * torch.randn(ad[n].shape, generator=gen, dtype=D)).to(
                torch.float32).to(D)
    lc.st_write(ad_path, sorted(ad.items()))
    if not zinc(a, work, "--init-from", "q", "--init-adapter", "init", *common, "--steps",
                str(lc.STEPS), "--steps-per-print", "1", "--save-adapter", "out"):
        return 1
    with open(os.path.join(csv_dir, "qlora", "Train_Samples_train_loss.csv")) as f:
        zinc_loss = [float(line.split(",")[1]) for line in f.read().split("\n")[1:] if line]
    out = {n: f32(raw, shape) for n, (dt, shape, raw) in
           lc.st_entries(os.path.join(work, "out", "adapter_model.safetensors")).items()}

    base = dequantized_base(os.path.join(work, "q", "model.safetensors"))
    missing = sorted(set(params) - set(base))
    if missing:
        print("qlora_check: the quantized checkpoint lacks %s" % missing[:3])
        return 1
    scale = ALPHA / R
    train = {n: w.clone() for n, w in ad.items()}
    initial = {n: w.clone() for n, w in ad.items()}
    state, ref_loss = {}, []
    for s in range(lc.STEPS):
        idx = [(s * lc.B + b) * lc.T for b in range(lc.B)]
        x = torch.stack([tokens[i:i + lc.T] for i in idx])
        y = torch.stack([tokens[i + 1:i + lc.T + 1] for i in idx])
        leaves = {n: w.clone().requires_grad_(True) for n, w in train.items()}
        p = dict(base)
        for m in adapter_names(c):
            A = leaves["base_model.model.%s.lora_A.weight" % m]
            Bm = leaves["base_model.model.%s.lora_B.weight" % m]
            p[m + ".weight"] = base[m + ".weight"] + scale * (Bm @ A)
        loss = lc.forward(p, c, x, y)
        loss.backward()
        ref_loss.append(loss.item())
        lc.adamw(train, {n: w.grad for n, w in leaves.items()}, state, s + 1)

    ok = len(zinc_loss) == lc.STEPS and sorted(out) == sorted(train)
    loss_diff = max(abs(u - v) for u, v in zip(zinc_loss, ref_loss)) if ok else float("inf")
    moved = max((train[n] - initial[n]).abs().max().item() for n in train)
    w_diff = max((out[n] - train[n]).abs().max().item() for n in train) if ok else float("inf")
    for s in range(min(len(zinc_loss), lc.STEPS)):
        print("step %d: zinc loss %.7f, float64 reference %.7f" % (s + 1, zinc_loss[s],
                                                                    ref_loss[s]))
    print("qlora_check: max loss difference %.3g (limit 1e-4), max adapter difference %.3g "
          "(limit 1e-3; the adapters moved up to %.3g)" % (loss_diff, w_diff, moved))
    good = ok and loss_diff <= 1e-4 and w_diff <= 1e-3 and moved > 1e-3
    print("qlora_check: %s" % ("PASS" if good else "FAIL"))
    if not a.keep:
        subprocess.run(["rm", "-rf", work])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
