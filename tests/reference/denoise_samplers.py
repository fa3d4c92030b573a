"""Reference for engines/denoise: flow-matching schedules, samplers and guidance, in float64.

A from-scratch re-statement of the formulas of diffusers' FlowMatchEulerDiscreteScheduler
(set_timesteps: shift, dynamic shifting with exponential or linear time shift, shift_terminal,
invert_sigmas, the terminal sigma), of UniPCMultistepScheduler with flow sigmas and
prediction_type "flow_prediction" (bh1/bh2 predictor-corrector, predict_x0, lower_order_final,
disable_corrector), of the pipelines' calculate_shift and Z-Image's default sigmas, and of the
guidance variants: CFG, the CFG interval, Z-Image's cfg_truncation / cfg_normalization,
CFG-Zero* (optimized scale + zero-init) and rescale_noise_cfg. No diffusers import: the
formulas are restated so the C++ engine is checked against the published maths, not a copy.

Trajectories run a fake velocity field on small random latents: each conditioning is three
numbers (a, b, c) and the "model" returns v = a * x + b * sigma * y + c, y a fixed random tensor.
The latent is rounded to float32 after every step (the engine holds f32 latents, as the
diffusers pipelines do); everything else is float64.

Output: DIR/reference.json (json keeps float64 exactly): {"schedules": [...], "trajectories": [...]}.
Usage: denoise_samplers.py --out DIR [--seed N]
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prism_ref  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Schedules


def calculate_shift(image_seq_len, base_seq_len=256, max_seq_len=4096, base_shift=0.5, max_shift=1.15):
    """mu of dynamic shifting: a line through (base_seq_len, base_shift) and (max_seq_len, max_shift)."""
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * slope + (base_shift - slope * base_seq_len)


def z_image_default_sigmas(num_steps):
    """pipeline_z_image.py's default: num_steps values evenly from 1 down to 1 / num_steps."""
    if num_steps == 1:
        return [1.0]
    return [1.0 + i * (1.0 / num_steps - 1.0) / (num_steps - 1) for i in range(num_steps)]


def time_shift(kind, mu, t):
    if kind == "exponential":
        return math.exp(mu) / (math.exp(mu) + (1.0 / t - 1.0))
    return mu / (mu + (1.0 / t - 1.0))


def static_shift(shift, s):
    return shift * s / (1.0 + (shift - 1.0) * s)


def stretch_to_terminal(sigmas, terminal):
    """Rescales 1 - sigma so that the last sigma lands on `terminal`."""
    scale = (1.0 - sigmas[-1]) / (1.0 - terminal)
    return [1.0 - (1.0 - s) / scale for s in sigmas]


def linspace(a, b, n):
    if n == 1:
        return [a]
    return [a + i * (b - a) / (n - 1) for i in range(n)]


def flow_match_euler_schedule(cfg, num_steps, mu=None, sigmas=None):
    """FlowMatchEulerDiscreteScheduler.set_timesteps -> (sigmas + terminal, timesteps)."""
    n_train = cfg.get("num_train_timesteps", 1000)
    shift = cfg.get("shift", 1.0)
    dynamic = cfg.get("use_dynamic_shifting", False)
    kind = cfg.get("time_shift_type", "exponential")
    if sigmas is None:
        # The training table's ends (already shifted when the shift is static), then a linspace
        # between them that set_timesteps shifts again: diffusers' schedule, double shift included.
        sigma_max, sigma_min = 1.0, 1.0 / n_train
        if not dynamic:
            sigma_max, sigma_min = static_shift(shift, sigma_max), static_shift(shift, sigma_min)
        sigmas = [t / n_train for t in linspace(sigma_max * n_train, sigma_min * n_train, num_steps)]
    sigmas = list(sigmas)
    if dynamic:
        sigmas = [time_shift(kind, mu, s) for s in sigmas]
    else:
        sigmas = [static_shift(shift, s) for s in sigmas]
    if cfg.get("shift_terminal"):
        sigmas = stretch_to_terminal(sigmas, cfg["shift_terminal"])
    if cfg.get("invert_sigmas", False):
        sigmas = [1.0 - s for s in sigmas]
        return sigmas + [1.0], [s * n_train for s in sigmas]
    return sigmas + [0.0], [s * n_train for s in sigmas]


def unipc_flow_schedule(cfg, num_steps, mu=None, sigmas=None):
    """UniPCMultistepScheduler.set_timesteps with use_flow_sigmas -> (sigmas + terminal, timesteps)."""
    n_train = cfg.get("num_train_timesteps", 1000)
    if sigmas is None:
        sigmas = linspace(1.0, 1.0 / n_train, num_steps + 1)[:-1]
    sigmas = list(sigmas)
    if cfg.get("use_dynamic_shifting", False):
        sigmas = [time_shift(cfg.get("time_shift_type", "exponential"), mu, s) for s in sigmas]
    else:
        sigmas = [static_shift(cfg.get("flow_shift", 1.0), s) for s in sigmas]
    if cfg.get("shift_terminal"):
        sigmas = stretch_to_terminal(sigmas, cfg["shift_terminal"])
    if abs(sigmas[0] - 1.0) < 1e-6:
        sigmas[0] -= 1e-6  # keeps log(sigma / (1 - sigma)) finite at the first step
    timesteps = [float(int(s * n_train)) for s in sigmas]  # the scheduler casts them to int64
    last = sigmas[-1] if cfg.get("final_sigmas_type", "zero") == "sigma_min" else 0.0
    return sigmas + [last], timesteps


# ---------------------------------------------------------------------------------------------
# Samplers: x [C, H, W] float64, v the flow velocity (x_{s'} = x_s + (s' - s) v).


def euler_step(x, v, sigma, sigma_next):
    return x + (sigma_next - sigma) * v


class UniPC:
    """UniPC multistep (predictor bh1/bh2 + corrector), data prediction, flow sigmas."""

    def __init__(self, sigmas, order=2, solver_type="bh2", lower_order_final=True, disable_corrector=()):
        self.sigmas, self.order, self.solver_type = sigmas, order, solver_type
        self.lower_order_final, self.disable_corrector = lower_order_final, set(disable_corrector)
        self.x0s = []  # data predictions, newest last (at most `order`)
        self.last_sample = None
        self.lower_order_nums = 0
        self.this_order = 0
        self.i = 0

    @staticmethod
    def lam(s):
        # log(alpha / sigma) with alpha = 1 - sigma; +inf at sigma = 0.
        return math.inf if s == 0 else math.log(1.0 - s) - math.log(s)

    def coefficients(self, s_t, s_s0, prev_sigmas, order):
        """h-dependent terms for a step from s_s0 to s_t with `order - 1` earlier points."""
        h = self.lam(s_t) - self.lam(s_s0)
        rks = [(self.lam(s) - self.lam(s_s0)) / h for s in prev_sigmas] + [1.0]
        hh = -h
        h_phi_1 = math.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1.0
        b_h = hh if self.solver_type == "bh1" else math.expm1(hh)
        fact = 1
        R, b = [], []
        for k in range(1, order + 1):
            R.append([r ** (k - 1) for r in rks])
            b.append(h_phi_k * fact / b_h)
            fact *= k + 1
            h_phi_k = h_phi_k / hh - 1.0 / fact
        return rks, R, b, h_phi_1, b_h

    def step(self, v, x):
        i, sig = self.i, self.sigmas
        x0 = x - sig[i] * v
        if i > 0 and (i - 1) not in self.disable_corrector and self.last_sample is not None:
            x = self.corrector(x0, self.last_sample, self.this_order)
        self.x0s = (self.x0s + [x0])[-self.order:]
        this_order = min(self.order, len(sig) - 1 - i) if self.lower_order_final else self.order
        if sig[i + 1] == 0:
            this_order = 1  # a multistep predictor into sigma 0 divides by zero (diffusers: inf)
        self.this_order = min(this_order, self.lower_order_nums + 1)
        self.last_sample = x
        out = self.predictor(x, self.this_order)
        self.lower_order_nums = min(self.lower_order_nums + 1, self.order)
        self.i += 1
        return out

    def predictor(self, x, order):
        i, sig = self.i, self.sigmas
        s_t, s_s0 = sig[i + 1], sig[i]
        if s_t == s_s0:
            return x  # final_sigmas_type "sigma_min" repeats the last sigma: a step of length 0
        m0 = self.x0s[-1]
        prev = [sig[i - k] for k in range(1, order)]
        rks, R, b, h_phi_1, b_h = self.coefficients(s_t, s_s0, prev, order)
        alpha_t = 1.0 - s_t
        out = (s_t / s_s0) * x - alpha_t * h_phi_1 * m0
        if order > 1:
            d1s = [(self.x0s[-(k + 1)] - m0) / rks[k - 1] for k in range(1, order)]
            rhos = [0.5] if order == 2 else solve([r[:-1] for r in R[:-1]], b[:-1])
            out = out - alpha_t * b_h * sum(r * d for r, d in zip(rhos, d1s))
        return out

    def corrector(self, x0_t, last_sample, order):
        i, sig = self.i, self.sigmas
        s_t, s_s0 = sig[i], sig[i - 1]
        m0 = self.x0s[-1]
        prev = [sig[i - (k + 1)] for k in range(1, order)]
        rks, R, b, h_phi_1, b_h = self.coefficients(s_t, s_s0, prev, order)
        rhos = [0.5] if order == 1 else solve(R, b)
        alpha_t = 1.0 - s_t
        out = (s_t / s_s0) * last_sample - alpha_t * h_phi_1 * m0
        corr = sum(rhos[k - 1] * (self.x0s[-(k + 1)] - m0) / rks[k - 1] for k in range(1, order))
        return out - alpha_t * b_h * (corr + rhos[-1] * (x0_t - m0))


def solve(A, b):
    return torch.linalg.solve(torch.tensor(A, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)).tolist()


# ---------------------------------------------------------------------------------------------
# Guidance (per sample: cond, uncond are one request's velocities).


def cfg_zero_star_scale(cond, uncond):
    """CFG-Zero*'s optimized scale: <cond, uncond> / (||uncond||^2 + 1e-8)."""
    return float((cond * uncond).sum() / ((uncond * uncond).sum() + 1e-8))


def rescale_noise_cfg(pred, cond, phi):
    """diffusers' rescale_noise_cfg: match the guided prediction's std to cond's, mixed by phi."""
    rescaled = pred * (cond.std() / pred.std())  # unbiased std over the whole sample
    return phi * rescaled + (1.0 - phi) * pred


def cfg_on(g, step, num_steps, sigma):
    if g["guidance_scale"] == 1.0 or not g["has_uncond"]:
        return False
    if not (int(g["interval_start"] * num_steps) <= step < int(g["interval_stop"] * num_steps)):
        return False
    trunc = g.get("cfg_truncation")
    if trunc is not None and trunc <= 1.0 and (1.0 - sigma) > trunc:
        return False
    return True


def guide(g, cond, uncond):
    w = g["guidance_scale"]
    if g.get("cfg_zero_star", False):
        uncond = uncond * cfg_zero_star_scale(cond, uncond)
    pred = uncond + w * (cond - uncond)
    norm_cap = g.get("cfg_normalization", 0.0)
    if norm_cap > 0:
        cap = float(torch.linalg.vector_norm(cond)) * norm_cap
        n = float(torch.linalg.vector_norm(pred))
        if n > cap:
            pred = pred * (cap / n)
    if g.get("guidance_rescale", 0.0) > 0:
        pred = rescale_noise_cfg(pred, cond, g["guidance_rescale"])
    return pred


# ---------------------------------------------------------------------------------------------
# Trajectories


def fake_velocity(coef, x, sigma, y):
    a, b, c = coef
    return a * x + b * sigma * y + c


def run_trajectory(t):
    x = torch.tensor(t["x_init"], dtype=torch.float64).view(t["shape"])
    y = torch.tensor(t["y"], dtype=torch.float64).view(t["shape"])
    sigmas, g = t["sigmas"], t["guidance"]
    n = len(sigmas) - 1
    unipc = UniPC(sigmas, **t["unipc"]) if t["sampler"] == "unipc" else None
    latents, x0s, passes = [x.flatten().tolist()], [], {"cond": 0, "uncond": 0}
    for i in range(n):
        s = sigmas[i]
        if i < g.get("zero_init_steps", 0):
            v = torch.zeros_like(x)
        else:
            v = fake_velocity(t["cond"], x, s, y)
            passes["cond"] += 1
            if cfg_on(g, i, n, s):
                passes["uncond"] += 1
                v = guide(g, v, fake_velocity(t["uncond"], x, s, y))
        x0s.append((x - s * v).flatten().tolist())
        x = unipc.step(v, x) if unipc else euler_step(x, v, s, sigmas[i + 1])
        x = x.float().double()  # the engine's latent is f32
        latents.append(x.flatten().tolist())
    t["expected_latents"], t["expected_x0"], t["expected_passes"] = latents, x0s, passes
    return t


FLUX_DEV = {"_class_name": "FlowMatchEulerDiscreteScheduler", "base_image_seq_len": 256, "base_shift": 0.5,
            "max_image_seq_len": 4096, "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 3.0,
            "use_dynamic_shifting": True}
Z_IMAGE = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0,
           "use_dynamic_shifting": False}
SD3 = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0}
LTX = {"_class_name": "FlowMatchEulerDiscreteScheduler", "base_image_seq_len": 1024, "base_shift": 0.95,
       "max_image_seq_len": 4096, "max_shift": 2.05, "num_train_timesteps": 1000, "shift": 1.0,
       "shift_terminal": 0.1, "use_dynamic_shifting": True, "time_shift_type": "linear"}
INVERTED = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 2.0,
            "invert_sigmas": True}
WAN = {"_class_name": "UniPCMultistepScheduler", "beta_end": 0.02, "beta_schedule": "linear", "beta_start": 0.0001,
       "disable_corrector": [], "dynamic_thresholding_ratio": 0.995, "final_sigmas_type": "zero", "flow_shift": 3.0,
       "lower_order_final": True, "num_train_timesteps": 1000, "predict_x0": True,
       "prediction_type": "flow_prediction", "rescale_betas_zero_snr": False, "sample_max_value": 1.0,
       "solver_order": 2, "solver_p": None, "solver_type": "bh2", "steps_offset": 0, "thresholding": False,
       "timestep_spacing": "linspace", "trained_betas": None, "use_beta_sigmas": False,
       "use_exponential_sigmas": False, "use_flow_sigmas": True, "use_karras_sigmas": False}


def schedule_cases():
    """(name, config, steps, image_seq_len or None, custom sigmas: None | "z_image")."""
    return [
        ("sd3_28", SD3, 28, None, None),
        ("flux_dev_50_1024px", FLUX_DEV, 50, 4096, None),
        ("flux_dev_20_512px", FLUX_DEV, 20, 1024, None),
        ("z_image_9", Z_IMAGE, 9, 4096, "z_image"),
        ("z_image_1", Z_IMAGE, 1, 4096, "z_image"),
        ("z_image_50", Z_IMAGE, 50, 1024, "z_image"),
        ("ltx_linear_terminal_30", LTX, 30, 2048, None),
        ("inverted_10", INVERTED, 10, None, None),
        ("wan_unipc_50", WAN, 50, None, None),
        ("wan_unipc_shift5_terminal", {**WAN, "flow_shift": 5.0, "shift_terminal": 0.02}, 20, None, None),
        ("unipc_dynamic", {**WAN, "use_dynamic_shifting": True}, 12, 3000, None),
        ("unipc_sigma_min", {**WAN, "final_sigmas_type": "sigma_min"}, 8, None, None),
    ]


def make_schedule(cfg, steps, seq_len, custom):
    mu = None
    if seq_len is not None:
        mu = calculate_shift(seq_len, cfg.get("base_image_seq_len", 256), cfg.get("max_image_seq_len", 4096),
                             cfg.get("base_shift", 0.5), cfg.get("max_shift", 1.15))
    sigmas = z_image_default_sigmas(steps) if custom == "z_image" else None
    if cfg["_class_name"] == "UniPCMultistepScheduler":
        return mu, unipc_flow_schedule(cfg, steps, mu, sigmas)
    return mu, flow_match_euler_schedule(cfg, steps, mu, sigmas)


def plain_guidance(**kw):
    g = {"guidance_scale": 1.0, "has_uncond": False, "interval_start": 0.0, "interval_stop": 1.0}
    g.update(kw)
    return g


def trajectory_cases():
    """(name, schedule case, sampler, unipc options, guidance)."""
    cfg = dict(has_uncond=True, guidance_scale=4.0)
    return [
        ("euler_plain", "z_image_9", "euler", {}, plain_guidance()),
        ("euler_cfg", "sd3_28", "euler", {}, plain_guidance(**cfg)),
        ("euler_cfg_interval", "flux_dev_20_512px", "euler", {},
         plain_guidance(**cfg, interval_start=0.1, interval_stop=0.6)),
        ("euler_cfg_rescale", "sd3_28", "euler", {}, plain_guidance(**cfg, guidance_rescale=0.7)),
        ("euler_cfg_zero_star", "flux_dev_20_512px", "euler", {},
         plain_guidance(**cfg, cfg_zero_star=True, zero_init_steps=2)),
        ("z_image_truncation_normalization", "z_image_50", "euler", {},
         plain_guidance(**cfg, cfg_truncation=0.6, cfg_normalization=1.05)),
        ("unipc_bh2", "wan_unipc_50", "unipc", {"order": 2, "solver_type": "bh2"}, plain_guidance()),
        ("unipc_bh2_cfg", "wan_unipc_shift5_terminal", "unipc", {"order": 2, "solver_type": "bh2"},
         plain_guidance(**cfg)),
        ("unipc_bh1_order3", "unipc_dynamic", "unipc", {"order": 3, "solver_type": "bh1"}, plain_guidance()),
        ("unipc_no_lower_final_disable", "unipc_sigma_min", "unipc",
         {"order": 2, "solver_type": "bh2", "lower_order_final": False, "disable_corrector": [2]},
         plain_guidance(**cfg)),
    ]


def generate(out_dir, seed):
    gen = prism_ref.seed_everything(seed)
    schedules = {}
    out = {"schedules": [], "trajectories": []}
    for name, cfg, steps, seq_len, custom in schedule_cases():
        mu, (sigmas, timesteps) = make_schedule(cfg, steps, seq_len, custom)
        schedules[name] = sigmas
        out["schedules"].append({"name": name, "config": cfg, "num_steps": steps, "image_seq_len": seq_len,
                                 "z_image_sigmas": custom == "z_image", "mu": mu, "sigmas": sigmas,
                                 "timesteps": timesteps})
    shape = [4, 3, 5]
    for name, sched, sampler, unipc, guidance in trajectory_cases():
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        y = torch.randn(shape, generator=gen, dtype=torch.float32)
        coef = lambda: [round(float(v), 6) for v in (torch.rand(3, generator=gen) - 0.5)]  # noqa: E731
        t = {"name": name, "shape": shape, "sigmas": schedules[sched], "sampler": sampler, "unipc": unipc,
             "guidance": guidance, "x_init": x.flatten().double().tolist(), "y": y.flatten().double().tolist(),
             "cond": coef(), "uncond": coef()}
        out["trajectories"].append(run_trajectory(t))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    return out


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    a = parser.parse_args()
    generate(a.out, a.seed)


if __name__ == "__main__":
    main()
