#!/usr/bin/env python3
"""float64 reference of DeepSpeed's loss-scale schedule (deepspeed/runtime/fp16/loss_scaler.py,
DynamicLossScaler.update_scale, scale_factor 2), written from its documented behaviour, for
tests/test_lossscale.c. Prints the scale after each update for the cases the test checks;
the test holds this output (python3 tests/ref/lossscale_ref.py regenerates it)."""


class Dynamic:
    def __init__(self, power, window, hysteresis, consecutive, min_scale):
        self.scale = 2.0 ** power
        self.window = window
        self.delayed_shift = hysteresis
        self.cur_hysteresis = hysteresis
        self.consecutive = consecutive
        self.min_scale = min_scale
        self.iter = 0
        self.last_overflow_iter = -1

    def update(self, overflow):
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                self.scale = max(self.scale / 2.0, self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.iter
        else:
            if self.consecutive:
                self.cur_hysteresis = self.delayed_shift
            if (self.iter - self.last_overflow_iter) % self.window == 0:
                if not self.consecutive:
                    self.cur_hysteresis = self.delayed_shift
                self.scale *= 2.0
        self.iter += 1


# overflow pattern: 1 = overflow at that update
PATTERN = "0011010000000111110000000001101011111111110000000000"
CASES = [
    # name, initial_scale_power, window, hysteresis, consecutive, min_loss_scale
    ("window4_hyst2", 8, 4, 2, False, 1.0),
    ("window4_hyst2_consecutive", 8, 4, 2, True, 1.0),
    ("window3_hyst1_min8", 5, 3, 1, False, 8.0),
    ("window1000_hyst3", 16, 1000, 3, False, 1.0),
]

if __name__ == "__main__":
    print("pattern " + PATTERN)
    for name, power, window, hyst, cons, mn in CASES:
        s = Dynamic(power, window, hyst, cons, mn)
        out = []
        for c in PATTERN:
            s.update(c == "1")
            out.append(repr(s.scale))
        print(name, " ".join(out))
