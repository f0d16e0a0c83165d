#!/usr/bin/python3
"""Writes tests/ref/llama_kernels_ref.h: float64 references for the Llama-family kernels.

An independent implementation of Hugging Face's LlamaForCausalLM equations in float64
PyTorch (transformers is not needed): LlamaRMSNorm, the default and llama3 RoPE inverse
frequencies (_compute_default_rope_parameters, _compute_llama3_parameters), rotate_half /
apply_rotary_pos_emb, the SwiGLU MLP (silu(gate) * up) and eager grouped-query attention
(repeat_kv, causal mask, Mistral's sliding window: key visible when q - k < window).
Inputs are float32 values (exact in the header); references are float64.

    apt-get install -y python3-torch
    /usr/bin/python3 tests/ref/gen_llama_kernels.py > tests/ref/llama_kernels_ref.h
"""
import math
import sys

import torch

torch.manual_seed(20240801)
D = torch.float64


def f32(shape, lo, hi):
    x = torch.rand(shape, dtype=torch.float32) * (hi - lo) + lo
    return x.to(torch.float32)


def emit(name, t, ctype):
    vals = t.flatten().tolist()
    suffix = "f" if ctype == "float" else ""
    body = ",\n\t".join(", ".join(float(v).hex() + suffix for v in vals[i:i + 4])
                        for i in range(0, len(vals), 4))
    print(f"static const {ctype} {name}[{len(vals)}] = {{\n\t{body}\n}};")


def emit_int(name, vals):
    print(f"static const int {name}[{len(vals)}] = {{ {', '.join(str(v) for v in vals)} }};")


# ---- RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)) --------------------------------------
RMS_B, RMS_T, RMS_C, RMS_EPS = 2, 3, 24, 1e-6
rms_x = f32((RMS_B, RMS_T, RMS_C), -2, 2)
rms_w = f32((RMS_C,), 0.5, 1.5)
x = rms_x.to(D)
rms_rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)
rms_out = rms_w.to(D) * (x * rms_rstd)


# ---- RoPE inverse frequencies ------------------------------------------------------------
def inv_freq_default(theta, dim, dtype):
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))


def inv_freq_llama3(theta, dim, factor, low, high, old_len, dtype):
    inv = inv_freq_default(theta, dim, dtype)
    low_wl = old_len / low
    high_wl = old_len / high
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, inv_l)


# Llama 3.1 8B and Llama 3.2 1B: head_dim 128, theta 500000, L 8192, factors 8 and 32
L3 = dict(theta=500000.0, dim=128, low=1.0, high=4.0, old_len=8192)
inv_l3_8 = inv_freq_llama3(L3["theta"], 128, 8.0, 1.0, 4.0, 8192, D)
inv_l3_32 = inv_freq_llama3(L3["theta"], 128, 32.0, 1.0, 4.0, 8192, D)
inv_l3_8_f32 = inv_freq_llama3(L3["theta"], 128, 8.0, 1.0, 4.0, 8192, torch.float32)
inv_def = inv_freq_default(10000.0, 128, D)
inv_def_f32 = inv_freq_default(10000.0, 128, torch.float32)


# ---- RoPE on the fused qkv layout --------------------------------------------------------
def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_qkv(qkv, inv_freq, pos, NH, KV, hd):
    """qkv [B,T,(NH+2KV)hd] float64; HF's cos/sin from positions, q/k as [B,H,T,hd]."""
    B, T, _ = qkv.shape
    q = qkv[..., :NH * hd].view(B, T, NH, hd).transpose(1, 2)
    k = qkv[..., NH * hd:(NH + KV) * hd].view(B, T, KV, hd).transpose(1, 2)
    v = qkv[..., (NH + KV) * hd:]
    freqs = pos.to(D)[..., None] * inv_freq.to(D)[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return torch.cat((q.transpose(1, 2).reshape(B, T, NH * hd),
                      k.transpose(1, 2).reshape(B, T, KV * hd), v), dim=-1)


RO_B, RO_T, RO_NH, RO_KV, RO_HD, RO_THETA = 2, 5, 4, 2, 16, 10000.0
ro_qkv = f32((RO_B, RO_T, (RO_NH + 2 * RO_KV) * RO_HD), -1.5, 1.5)
ro_inv = inv_freq_default(RO_THETA, RO_HD, torch.float32)  # HF's fp32 frequencies
ro_pos = [3, 4, 5, 6, 7, 100, 101, 102, 250, 251]
ro_out_t = rope_qkv(ro_qkv.to(D), ro_inv, torch.arange(RO_T).expand(RO_B, RO_T),
                    RO_NH, RO_KV, RO_HD)
ro_out_p = rope_qkv(ro_qkv.to(D), ro_inv, torch.tensor(ro_pos).view(RO_B, RO_T),
                    RO_NH, RO_KV, RO_HD)

# ---- SwiGLU --------------------------------------------------------------------------------
SW_B, SW_T, SW_I = 2, 3, 20
sw_inp = f32((SW_B, SW_T, 2 * SW_I), -6, 6)
g, u = sw_inp.to(D)[..., :SW_I], sw_inp.to(D)[..., SW_I:]
sw_out = torch.nn.functional.silu(g) * u


# ---- grouped-query attention (eager, repeat_kv) ------------------------------------------
def gqa(qkv, NH, KV, hd, window):
    B, T, _ = qkv.shape
    q = qkv[..., :NH * hd].view(B, T, NH, hd).transpose(1, 2)
    k = qkv[..., NH * hd:(NH + KV) * hd].view(B, T, KV, hd).transpose(1, 2)
    v = qkv[..., (NH + KV) * hd:].view(B, T, KV, hd).transpose(1, 2)
    k = k.repeat_interleave(NH // KV, dim=1)  # repeat_kv
    v = v.repeat_interleave(NH // KV, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
    qi = torch.arange(T)[:, None]
    ki = torch.arange(T)[None, :]
    visible = ki <= qi
    if window:
        visible = visible & (ki > qi - window)
    scores = scores.masked_fill(~visible, float("-inf"))
    att = torch.softmax(scores, dim=-1)
    out = torch.matmul(att, v).transpose(1, 2).reshape(B, T, NH * hd)
    return out, att


GA_B, GA_T, GA_NH, GA_KV, GA_HD, GA_WIN = 2, 7, 6, 2, 4, 3
ga_qkv = f32((GA_B, GA_T, (GA_NH + 2 * GA_KV) * GA_HD), -1.5, 1.5)
ga_out, ga_att = gqa(ga_qkv.to(D), GA_NH, GA_KV, GA_HD, 0)
ga_out_w, ga_att_w = gqa(ga_qkv.to(D), GA_NH, GA_KV, GA_HD, GA_WIN)

# ---- one whole decoder layer, with separate q/k/v/o projections as HF stores them ---------
# LlamaDecoderLayer with attention_bias (biases on q, k, v and o), an explicit head_dim
# (not hidden / heads), GQA and llama3 RoPE frequencies; the kernels see the projections
# stacked (q_proj, k_proj, v_proj rows one after the other; gate_proj then up_proj).
DL_B, DL_T, DL_H, DL_NH, DL_KV, DL_HD, DL_I = 2, 5, 16, 4, 2, 6, 24
DL_EPS = 1e-5
dl_x = f32((DL_B, DL_T, DL_H), -1, 1)
dl_ln1 = f32((DL_H,), 0.5, 1.5)
dl_wq = f32((DL_NH * DL_HD, DL_H), -0.5, 0.5)
dl_bq = f32((DL_NH * DL_HD,), -0.2, 0.2)
dl_wk = f32((DL_KV * DL_HD, DL_H), -0.5, 0.5)
dl_bk = f32((DL_KV * DL_HD,), -0.2, 0.2)
dl_wv = f32((DL_KV * DL_HD, DL_H), -0.5, 0.5)
dl_bv = f32((DL_KV * DL_HD,), -0.2, 0.2)
dl_wo = f32((DL_H, DL_NH * DL_HD), -0.5, 0.5)
dl_bo = f32((DL_H,), -0.2, 0.2)
dl_ln2 = f32((DL_H,), 0.5, 1.5)
dl_wg = f32((DL_I, DL_H), -0.5, 0.5)
dl_wu = f32((DL_I, DL_H), -0.5, 0.5)
dl_wd = f32((DL_H, DL_I), -0.5, 0.5)
dl_inv = inv_freq_llama3(500000.0, DL_HD, 8.0, 1.0, 4.0, 16, torch.float32)


def rms(x, w):
    return w.to(D) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + DL_EPS))


def lin(x, w, b=None):
    return torch.nn.functional.linear(x, w.to(D), None if b is None else b.to(D))


def decoder_layer(x):
    B, T, _ = x.shape
    h = rms(x, dl_ln1)
    q = lin(h, dl_wq, dl_bq).view(B, T, DL_NH, DL_HD).transpose(1, 2)
    k = lin(h, dl_wk, dl_bk).view(B, T, DL_KV, DL_HD).transpose(1, 2)
    v = lin(h, dl_wv, dl_bv).view(B, T, DL_KV, DL_HD).transpose(1, 2)
    freqs = torch.arange(T).to(D)[None, :, None] * dl_inv.to(D)[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(DL_NH // DL_KV, dim=1)
    v = v.repeat_interleave(DL_NH // DL_KV, dim=1)
    s = torch.matmul(q, k.transpose(2, 3)) * DL_HD ** -0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(B, T, -1)
    x = x + lin(a, dl_wo, dl_bo)
    h = rms(x, dl_ln2)
    return x + lin(torch.nn.functional.silu(lin(h, dl_wg)) * lin(h, dl_wu), dl_wd)


dl_out = decoder_layer(dl_x.to(D))

print("/* Generated by tests/ref/gen_llama_kernels.py (PyTorch %s, float64): do not edit."
      % torch.__version__)
print(" * Hugging Face Llama equations on float32 inputs; see the script. */")
print("#ifndef ZN_TESTS_REF_LLAMA_KERNELS_H\n#define ZN_TESTS_REF_LLAMA_KERNELS_H\n")
print(f"enum {{ RMS_B = {RMS_B}, RMS_T = {RMS_T}, RMS_C = {RMS_C} }};")
print(f"#define RMS_EPS {RMS_EPS!r}f")
emit("rms_x", rms_x, "float")
emit("rms_w", rms_w, "float")
emit("rms_out", rms_out, "double")
emit("rms_rstd", rms_rstd, "double")
print("\n/* inv_freq, head_dim 128: theta 10000 default; theta 500000 llama3 (L 8192, low 1,"
      " high 4) factor 8 and 32; _f32: transformers' own fp32 computation */")
emit("rope_inv_default", inv_def, "double")
emit("rope_inv_default_f32", inv_def_f32, "float")
emit("rope_inv_llama3_8", inv_l3_8, "double")
emit("rope_inv_llama3_8_f32", inv_l3_8_f32, "float")
emit("rope_inv_llama3_32", inv_l3_32, "double")
print(f"\nenum {{ RO_B = {RO_B}, RO_T = {RO_T}, RO_NH = {RO_NH}, RO_KV = {RO_KV}, "
      f"RO_HD = {RO_HD} }};")
print(f"#define RO_THETA {RO_THETA!r}")
emit("ro_qkv", ro_qkv, "float")
emit_int("ro_pos", ro_pos)
emit("ro_out_t", ro_out_t, "double")
emit("ro_out_p", ro_out_p, "double")
print(f"\nenum {{ SW_B = {SW_B}, SW_T = {SW_T}, SW_I = {SW_I} }};")
emit("sw_inp", sw_inp, "float")
emit("sw_out", sw_out, "double")
print(f"\nenum {{ GA_B = {GA_B}, GA_T = {GA_T}, GA_NH = {GA_NH}, GA_KV = {GA_KV}, "
      f"GA_HD = {GA_HD}, GA_WIN = {GA_WIN} }};")
emit("ga_qkv", ga_qkv, "float")
emit("ga_out", ga_out, "double")
emit("ga_att", ga_att, "double")
emit("ga_out_w", ga_out_w, "double")
emit("ga_att_w", ga_att_w, "double")
print(f"\n/* one decoder layer (attention_bias, head_dim {DL_HD} != hidden / heads, llama3"
      " RoPE with L 16) */")
print(f"enum {{ DL_B = {DL_B}, DL_T = {DL_T}, DL_H = {DL_H}, DL_NH = {DL_NH}, DL_KV = {DL_KV}, "
      f"DL_HD = {DL_HD}, DL_I = {DL_I} }};")
print(f"#define DL_EPS {DL_EPS!r}f")
for name in ("x", "ln1", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "ln2", "wg", "wu",
             "wd"):
    emit("dl_" + name, globals()["dl_" + name], "float")
emit("dl_out", dl_out, "double")
print("\n#endif")
