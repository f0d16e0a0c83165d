#!/usr/bin/env python3
"""Training with zinc from Python: ctypes over libzinc.so's public API (docs/api.md).

    ZINC_LIBRARY=/usr/local/lib/libzinc.so \\
        python3 train.py --model tiny --data data/demo.txt --steps 20 --device host

The same program as examples/train.c, line for line: one line per step,
"step N/M | loss X.XXXX | lr L | T ms", the losses `zinc train` prints with the same
settings. Flags other than --model / --init-from / --data / --steps / --seq are zinc's
config flags (--lr, --micro-batch, --device, --config ds.json, ...). The library is
$ZINC_LIBRARY, else the one the dynamic linker finds (ctypes.util.find_library).
"""
import ctypes
import ctypes.util
import os
import sys

c_int, c_double, c_float = ctypes.c_int, ctypes.c_double, ctypes.c_float
c_i64, c_u64, c_char_p = ctypes.c_int64, ctypes.c_uint64, ctypes.c_char_p


class TrainerOptions(ctypes.Structure):  # struct zn_trainer_options
    _fields_ = [("data", c_char_p), ("steps", c_int), ("seq", c_int),
                ("warmup_ratio", c_double), ("resume", c_char_p),
                ("val_data", c_char_p), ("eval_batches", c_int)]


class StepStats(ctypes.Structure):  # struct zn_step_stats
    _fields_ = [("step", c_i64), ("loss", c_float), ("lr", c_float),
                ("grad_norm", c_float), ("tokens", c_u64)] + \
        [(n, c_double) for n in ("step_ms", "fwd_ms", "bwd_ms", "opt_ms", "wait_ms",
                                 "host_wait_ms")] + \
        [(n, c_u64) for n in ("device_peak_bytes", "pinned_bytes", "plan_device_bytes",
                              "pinned_size_bytes", "nvme_read_bytes", "nvme_write_bytes",
                              "plan_nvme_read_bytes", "plan_nvme_write_bytes",
                              "plan_nvme_first_read_bytes", "copy_h2d_bytes",
                              "copy_d2h_bytes")] + \
        [("loss_scale", c_float), ("overflow", ctypes.c_bool), ("next_loss_scale", c_float)]


def load():
    path = os.environ.get("ZINC_LIBRARY") or ctypes.util.find_library("zinc") or "libzinc.so"
    lib = ctypes.CDLL(path)
    p = ctypes.c_void_p
    lib.zn_config_size.restype = ctypes.c_size_t
    lib.zn_config_from_args.argtypes = [p, c_int, p, p, ctypes.POINTER(c_int)]
    lib.zn_net_from_flags.argtypes = [ctypes.POINTER(p), c_int, p]
    lib.zn_trainer_create.argtypes = [ctypes.POINTER(p), p, p, ctypes.POINTER(TrainerOptions)]
    lib.zn_trainer_step.argtypes = [p, ctypes.POINTER(StepStats)]
    lib.zn_trainer_destroy.argtypes = [p]
    lib.zn_net_destroy.argtypes = [p]
    lib.zn_last_error.restype = c_char_p
    return lib


def usage():
    sys.stderr.write("usage: train.py (--model PRESET | --init-from DIR) --data FILE "
                     "[--steps N] [--seq T] [zinc config flags]\n")
    sys.exit(2)


def main():
    lib = load()
    # the config as zinc train reads it: defaults, --config FILE, then config flags
    args = [a.encode() for a in sys.argv[1:]]
    argv = (c_char_p * (len(args) + 1))(*args)
    rest = (c_char_p * (len(args) + 1))()
    n = c_int(0)
    cfg = ctypes.create_string_buffer(lib.zn_config_size())
    if lib.zn_config_from_args(cfg, len(args), argv, rest, ctypes.byref(n)):
        usage()
    own = {"--model": None, "--init-from": None, "--data": None, "--steps": b"20",
           "--seq": None}
    left = list(rest[:n.value])
    while left:
        flag = left.pop(0).decode()
        if flag not in own or not left:
            sys.stderr.write("train.py: %s: %s\n" % (flag, "needs a value" if flag in own
                                                     else "unknown option"))
            usage()
        own[flag] = left.pop(0)
    if (own["--model"] is None) == (own["--init-from"] is None) or own["--data"] is None:
        usage()

    # the model (--seq T is its length and the training length, as in zinc train),
    # the trainer, the steps
    flags = [b"--init-from", own["--init-from"]] if own["--init-from"] else \
        [b"--model", own["--model"]]
    if own["--seq"]:
        flags += [b"--seq", own["--seq"]]
    steps = int(own["--steps"])
    opt = TrainerOptions(data=own["--data"], steps=steps,
                         seq=int(own["--seq"]) if own["--seq"] else 0)
    net, trainer, st = ctypes.c_void_p(), ctypes.c_void_p(), StepStats()
    rc = lib.zn_net_from_flags(ctypes.byref(net), len(flags), (c_char_p * len(flags))(*flags))
    if rc == 0:
        rc = lib.zn_trainer_create(ctypes.byref(trainer), cfg, net, ctypes.byref(opt))
    while rc == 0:
        rc = lib.zn_trainer_step(trainer, ctypes.byref(st))
        if rc == 0:
            print("step %d/%d | loss %.4f | lr %.3g | %.1f ms" % (st.step, steps, st.loss,
                                                                  st.lr, st.step_ms),
                  flush=True)
    if rc < 0:
        sys.stderr.write("train.py: %s\n" % lib.zn_last_error().decode())
    lib.zn_trainer_destroy(trainer)
    lib.zn_net_destroy(net)
    return 1 if rc < 0 else 0


if __name__ == "__main__":
    sys.exit(main())
