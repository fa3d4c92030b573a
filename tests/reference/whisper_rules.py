"""Reference for frontends/speech_processor: openai/whisper's decoding-time logit
filters (decoding.py: SuppressBlank, SuppressTokens, ApplyTimestampRules, and
detect_language's pick among the language tokens) written again here in torch from the
algorithm, run over seeded random logit rows and token histories. The ids come from the
model directory's files (tokenizer.json's added tokens, generation_config.json), found the
way openai's Tokenizer finds them: by the tokens' text.

    whisper_rules.py --out DIR --model-dir NAME=WHISPER_DIR [--model-dir NAME=DIR ...] [--seed N]

Each WHISPER_DIR holds tokenizer.json, config.json and optionally generation_config.json
(tests/test_util/whisper_tokenizer.h writes them); several in one run pay torch's import
once. Writes DIR/cases_<NAME>.safetensors for each:
case.<i>.logits_in (F16 [vocab]: a row before the rules; the rules run on its exact f32
values), case.<i>.finite_out (U8 [vocab]: 1 where the row is finite after them — the rules
only set -inf, so with the input this is the whole output row, which is checked here),
probe.<i>.logits (F16 [vocab]: a row at <|startoftranscript|>), and metadata "cases" (JSON:
each case's options, prompt, generated tokens and, at a detection step, the language and its
probability) and "probes" (each probe's expected no_speech_prob).

The decode of a case follows openai's DecodingTask with the sot sequence completed by the
generated tokens: with the language unknown, step 0 is the detection (only the argmax
language token stays finite), step 1 forces the task, step 2 <|notimestamps|> when
timestamps are off; the filters apply from there, with sample_begin after those tokens.
Prism's additions, applied here too: the language tokens are suppressed with the specials;
without timestamps every timestamp token is suppressed; no timestamp beyond
segment_seconds (floor(segment_seconds / 0.02 + 1e-6)), applied after max_initial_timestamp.

NOTE: a row whose decision is within 1e-3 of a tie (timestamp mass against the best text
token, the two best language tokens) is drawn again, so float32 rounding in either
implementation cannot flip the outcome.
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prism_ref import generator_parser, save_file, seed_everything  # noqa: E402

# openai/whisper's LANGUAGES codes, in token order (yue: large-v3).
LANGUAGE_CODES = [
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
    "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
    "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
    "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
    "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
    "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
]
TIME_PRECISION = 0.02
MIN_MARGIN = 1e-3
NEG_INF = -np.inf


class WhisperIds:
    """The special ids of one model directory, and its files' rule settings."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
            tokenizer = json.load(f)
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        gen_path = os.path.join(model_dir, "generation_config.json")
        gen = {}
        if os.path.exists(gen_path):
            with open(gen_path, encoding="utf-8") as f:
                gen = json.load(f)
        added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
        vocab = tokenizer["model"]["vocab"]

        def find(*texts):
            for t in texts:
                if t in added:
                    return added[t]
            return None

        self.vocab_size = config.get("vocab_size")
        self.max_target_positions = config.get("max_target_positions", 448)
        self.eot = find("<|endoftext|>")
        self.sot = gen.get("decoder_start_token_id", find("<|startoftranscript|>"))
        self.sot_prev = gen.get("prev_sot_token_id", find("<|startofprev|>"))
        self.sot_lm = find("<|startoflm|>")
        self.no_speech = find("<|nospeech|>", "<|nocaptions|>")
        self.no_timestamps = gen.get("no_timestamps_token_id", find("<|notimestamps|>"))
        tasks = gen.get("task_to_id", {})
        self.transcribe = tasks.get("transcribe", find("<|transcribe|>"))
        self.translate = tasks.get("translate", find("<|translate|>"))
        self.timestamp_begin = find("<|0.00|>")
        if self.timestamp_begin is None:
            self.timestamp_begin = self.no_timestamps + 1
        self.multilingual = gen.get("is_multilingual", self.vocab_size >= 51865)
        if "lang_to_id" in gen:
            langs = [(k[2:-2], v) for k, v in gen["lang_to_id"].items()]
        else:
            langs = [(c, added[f"<|{c}|>"]) for c in LANGUAGE_CODES if f"<|{c}|>" in added]
        langs.sort(key=lambda cv: cv[1])
        self.language_tokens = [v for _, v in langs]
        self.languages = langs if self.multilingual else []
        self.suppress_tokens = gen.get("suppress_tokens", config.get("suppress_tokens")) or []
        begin = gen.get("begin_suppress_tokens", config.get("begin_suppress_tokens"))
        self.begin_suppress_tokens = begin if begin is not None else [vocab["\u0120"], self.eot]
        self.max_initial_timestamp_index = gen.get("max_initial_timestamp_index", 50)

    def language_token(self, code):
        return dict(self.languages)[code]


# ---- openai/whisper's filters (decoding.py), on logits [1, vocab] and tokens [1, n] ----------

def suppress_blank(logits, tokens, sample_begin, ids):
    if tokens.shape[1] == sample_begin:
        logits[:, ids.begin_suppress_tokens] = NEG_INF


def suppress_tokens(logits, suppress):
    logits[:, suppress] = NEG_INF


def apply_timestamp_rules(logits, tokens, sample_begin, ids, max_initial_timestamp_index, max_index):
    """Returns the margin of the timestamp-mass decision (for the tie check)."""
    tb = ids.timestamp_begin
    logits[:, ids.no_timestamps] = NEG_INF
    for k in range(tokens.shape[0]):
        sampled = tokens[k, sample_begin:]
        seq = sampled.tolist()
        last_was_timestamp = len(seq) >= 1 and seq[-1] >= tb
        penultimate_was_timestamp = len(seq) < 2 or seq[-2] >= tb
        if last_was_timestamp:
            if penultimate_was_timestamp:
                logits[k, tb:] = NEG_INF
            else:
                logits[k, : ids.eot] = NEG_INF
        timestamps = sampled[sampled.ge(tb)]
        if timestamps.numel() > 0:
            if last_was_timestamp and not penultimate_was_timestamp:
                timestamp_last = timestamps[-1]
            else:
                timestamp_last = timestamps[-1] + 1
            logits[k, tb:timestamp_last] = NEG_INF
    if tokens.shape[1] == sample_begin:
        logits[:, :tb] = NEG_INF
        if max_initial_timestamp_index is not None:
            logits[:, tb + max_initial_timestamp_index + 1:] = NEG_INF
    logits[:, tb + max_index + 1:] = NEG_INF  # Prism: nothing beyond the chunk's audio
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    margin = math.inf
    for k in range(tokens.shape[0]):
        timestamp_logprob = logprobs[k, tb:].logsumexp(dim=-1)
        max_text_token_logprob = logprobs[k, :tb].max()
        if torch.isfinite(timestamp_logprob) and torch.isfinite(max_text_token_logprob):
            margin = min(margin, abs(float(timestamp_logprob - max_text_token_logprob)))
        if timestamp_logprob > max_text_token_logprob:
            logits[k, :tb] = NEG_INF
    return margin


def detect_language(logits, ids):
    """detect_language's pick: argmax among the language tokens, its softmax over them."""
    tokens = torch.tensor([t for _, t in ids.languages])
    lang_logits = logits[0, tokens]
    probs = torch.softmax(lang_logits, dim=-1)
    best = int(lang_logits.argmax())
    top2 = torch.topk(lang_logits, 2).values
    forced = torch.full_like(logits, NEG_INF)
    forced[0, tokens[best]] = logits[0, tokens[best]]
    return forced, ids.languages[best][0], float(probs[best]), float(top2[0] - top2[1])


def force(logits, token):
    forced = torch.full_like(logits, NEG_INF)
    forced[0, token] = logits[0, token]
    return forced


# ---- one decode's prompt and rules --------------------------------------------------------

def prompt(ids, options):
    tokens = []
    tb = ids.timestamp_begin
    previous = [t for t in options["previous"] if 0 <= t < ids.eot or tb <= t <= tb + 1500]
    keep = previous[-(ids.max_target_positions // 2 - 1):]
    if keep:
        tokens += [ids.sot_prev] + keep
    tokens.append(ids.sot)
    language = options["language"]
    if ids.multilingual and language is None:
        return tokens
    if ids.multilingual:
        tokens += [ids.language_token(language), ids.translate if options["task"] == "translate" else ids.transcribe]
    if not options["timestamps"]:
        tokens.append(ids.no_timestamps)
    return tokens


def forced_steps(ids, options):
    if not ids.multilingual or options["language"] is not None:
        return []
    steps = ["detect", ids.translate if options["task"] == "translate" else ids.transcribe]
    if not options["timestamps"]:
        steps.append(ids.no_timestamps)
    return steps


def suppress_set(ids, options):
    """_get_suppress_tokens: the file's list plus the specials; Prism adds the languages."""
    s = list(ids.suppress_tokens)
    s += [ids.transcribe, ids.translate, ids.sot, ids.sot_prev, ids.sot_lm]
    if ids.no_speech is not None:
        s.append(ids.no_speech)
    s += ids.language_tokens
    if options["timestamps"]:
        s.append(ids.no_timestamps)
    return sorted(set(t for t in s if t is not None and 0 <= t < ids.vocab_size))


def apply_rules(row, ids, options, generated):
    """The processed row and what it observed: {"language", "language_prob"} at a detection
    step; the smallest decision margin (inf when there was no decision)."""
    logits = torch.tensor(row, dtype=torch.float32)[None].clone()
    steps = forced_steps(ids, options)
    if len(generated) < len(steps):
        step = steps[len(generated)]
        if step == "detect":
            out, code, prob, margin = detect_language(logits, ids)
            return out[0].numpy(), {"language": code, "language_prob": prob}, margin
        return force(logits, step)[0].numpy(), {}, math.inf
    initial = prompt(ids, options) + generated[: len(steps)]
    sample_begin = len(initial)
    tokens = torch.tensor([initial + generated[len(steps):]])
    suppress_blank(logits, tokens, sample_begin, ids)
    suppress_tokens(logits, suppress_set(ids, options))
    margin = math.inf
    if options["timestamps"]:
        max_index = int(min(max(math.floor(options["segment_seconds"] / TIME_PRECISION + 1e-6), 0), 1500))
        margin = apply_timestamp_rules(logits, tokens, sample_begin, ids, ids.max_initial_timestamp_index, max_index)
    else:
        logits[:, ids.timestamp_begin:] = NEG_INF
    return logits[0].numpy(), {}, margin


# ---- seeded rows and histories ------------------------------------------------------------

def random_row(rng, ids):
    """A logit row with one of a few shapes, so every rule fires both ways somewhere."""
    v = ids.vocab_size
    row = rng.standard_normal(v).astype(np.float32) * 2.0
    mode = rng.integers(0, 4)
    if mode == 0:  # one text token stands out
        row[rng.integers(0, ids.eot)] += 14.0
    elif mode == 1:  # one timestamp stands out
        row[rng.integers(ids.timestamp_begin, v)] += 14.0
    elif mode == 2:  # end of text likely
        row[ids.eot] += 12.0
    # mode 3: flat (the timestamps' mass wins)
    if ids.languages and rng.integers(0, 2) == 0:
        row[ids.languages[rng.integers(0, len(ids.languages))][1]] += 6.0
    return row.astype(np.float16)


def sample(rng, processed):
    finite = np.isfinite(processed)
    x = np.where(finite, processed.astype(np.float64), -np.inf)
    p = np.exp(x - x.max())
    p /= p.sum()
    return int(rng.choice(len(p), p=p))


def option_grid(ids):
    langs = [None, "en", "fr"] if ids.multilingual else [None]
    grid = []
    for language in langs:
        for timestamps in (True, False):
            grid.append({"language": language, "task": "transcribe", "timestamps": timestamps,
                         "segment_seconds": 30.0, "previous": []})
    grid.append({"language": langs[-1], "task": "translate" if ids.multilingual else "transcribe",
                 "timestamps": True, "segment_seconds": 0.9, "previous": [464, 3290, 318, ids.timestamp_begin + 3]})
    grid.append({"language": None, "task": "translate" if ids.multilingual else "transcribe", "timestamps": True,
                 "segment_seconds": 3.3, "previous": list(range(1000, 1300))})
    return grid


def arbitrary_histories(rng, ids):
    """Hand-shaped histories (text-part only) that sampling rarely reaches."""
    tb = ids.timestamp_begin
    t = lambda i: tb + i  # noqa: E731
    return [
        [t(0)],
        [t(0), t(5)],
        [t(0), 262, 318],
        [t(0), 262, t(40)],
        [t(0), 262, t(40), t(40)],
        [t(0), 262, t(40), t(40), 1110],
        [t(30), 262, t(10)],          # decreasing: later timestamps may not go back
        [262, 1110, 318],             # text with no timestamp at all
        [t(10), 262, t(20), 318, t(1490)],
        [ids.eot],
    ]


def main():
    parser = generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, action="append", help="NAME=DIR")
    args = parser.parse_args()
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for spec in args.model_dir:
        name, _, model_dir = spec.partition("=")
        rng = np.random.default_rng(args.seed)
        write_cases(WhisperIds(model_dir), rng, os.path.join(args.out, f"cases_{name}.safetensors"))


def write_cases(ids, rng, path):
    tensors, cases, probes = {}, [], []

    def add_case(options, generated):
        for _ in range(100):
            row = random_row(rng, ids)
            out, observed, margin = apply_rules(row.astype(np.float32), ids, options, generated)
            if margin >= MIN_MARGIN:
                break
        else:
            raise RuntimeError("no row without a near tie")
        finite = np.isfinite(out)
        if not np.array_equal(out[finite], row.astype(np.float32)[finite]):
            raise RuntimeError("a rule changed a finite logit")
        i = len(cases)
        tensors[f"case.{i}.logits_in"] = torch.from_numpy(row.copy())
        tensors[f"case.{i}.finite_out"] = torch.from_numpy(finite.astype(np.uint8))
        cases.append({"options": options, "prompt": prompt(ids, options), "generated": list(generated), **observed})
        return out

    for options in option_grid(ids):
        # The probe row at <|startoftranscript|>: no_speech_prob = softmax(row)[<|nospeech|>].
        row = random_row(rng, ids)
        row[ids.no_speech] += np.float16(rng.uniform(0, 10))
        j = len(probes)
        tensors[f"probe.{j}.logits"] = torch.from_numpy(row.copy())
        p = torch.softmax(torch.tensor(row.astype(np.float64)), dim=-1)[ids.no_speech]
        probes.append({"options": options, "no_speech_prob": float(p)})
        # A sampled decode through the rules, one case per step.
        generated = []
        for _ in range(7):
            out = add_case(options, generated)
            token = sample(rng, out)
            if token == ids.eot:
                break
            generated.append(token)
    known = {"language": "en" if ids.multilingual else None, "task": "transcribe", "timestamps": True,
             "segment_seconds": 30.0, "previous": []}
    for history in arbitrary_histories(rng, ids):
        add_case(known, history)
        add_case({**known, "segment_seconds": 0.5}, history)

    save_file(tensors, path, {"cases": json.dumps(cases), "probes": json.dumps(probes)})
    print(f"{path}: {len(cases)} cases, {len(probes)} probes")


if __name__ == "__main__":
    main()
