#!/usr/bin/env python3
"""Reference for the BERT-family encoders: writes a random model in one family's real
Hugging Face layout (config.json keys, parameter names, sentence-transformers files,
tokenizer) and reference.safetensors with fixed inputs and the expected outputs, which
tests/parity/bert_family_test.cpp matches.

Layouts (tiny by default; --hidden/--layers/--heads/--intermediate/--vocab/--max-positions
build real sizes for benchmarks, with --no-reference to skip the float64 outputs):
    bert    bert-base-uncased: BertForMaskedLM, names "bert.*" plus "cls.*" head tensors,
            LayerNorm weights named gamma/beta as in its original checkpoint, no
            sentence-transformers files (so: mean pooling, no normalisation)
    minilm  sentence-transformers/all-MiniLM-L6-v2: BertModel names without prefix (and the
            "embeddings.position_ids" buffer older checkpoints carry), mean pooling, Normalize
    bge     BAAI/bge-small-en-v1.5: BertModel, CLS pooling, Normalize
    e5      intfloat/e5-small-v2: BertModel, mean pooling, Normalize; the "query: " /
            "passage: " prefixes E5 expects, declared as sentence-transformers "prompts"
    gte     thenlper/gte-base: BertModel, mean pooling; no Normalize module here, so one layout
            checks unnormalised output
    xlmr    multilingual-e5-base / bge-m3 dense: XLMRobertaModel ("xlm-roberta"), positions
            offset by pad_token_id + 1, type_vocab_size 1, a small Unigram tokenizer.json
            with XLM-R's special tokens; mean pooling, Normalize
--masked-lm gives the *ForMaskedLM names ("bert."/"roberta." prefix and head tensors) to
any layout; --pooling overrides the family's pooling mode.

The forward pass, post-LN BERT:
    x = LayerNorm(word[ids] + position[pos] + token_type[0])
    per layer: a = LayerNorm(x + dense(attention(query(x), key(x), value(x))))
               x = LayerNorm(a + dense(act(intermediate(a))))
then pooling (CLS / mean / last token over the sequence's tokens) and, with Normalize,
x / max(||x||, 1e-12). Each input sequence runs alone, at positions 0..len-1 (XLM-R:
pad_token_id + 1 + i, what HF's create_position_ids_from_input_ids gives unpadded tokens),
token type 0. The outputs are computed in float64 from the stored (float32, or
bf16-rounded) weights, so they are exact to float32 storage. A reference, not a model: it
is written for reading and loops over sequences.

Usage: bert_family.py --layout LAYOUT --out DIR [--seed N] [--weight-dtype f32|bf16]
    [--max-shard-bytes N] [--masked-lm] [--pooling cls|mean|lasttoken] [--no-reference]
    [--hidden H --layers L --heads A --intermediate I --vocab V --max-positions P]
    [--testdata DIR]
Real sizes, random weights (speed does not depend on their values):
    all-MiniLM-L6-v2: --layout minilm --hidden 384 --layers 6 --heads 12 --intermediate 1536
                      --max-positions 512 --no-reference
    BERT-base:        --layout bert --hidden 768 --layers 12 --heads 12 --intermediate 3072
                      --max-positions 512 --no-reference
"""

import argparse
import dataclasses
import json
import math
import os
import shutil

import torch
from torch import nn
import torch.nn.functional as F

import prism_ref
import xlmr_tokenizer

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT_VOCAB_SIZE = 30522  # bert-base-uncased's WordPiece vocabulary
BERT_CLS, BERT_SEP = 101, 102
XLMR_BOS, XLMR_PAD, XLMR_EOS = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Layout:
    model_type: str            # config.json "model_type"
    architecture: str          # config.json "architectures"[0] (base model)
    pooling: str | None        # 1_Pooling mode; None: no sentence-transformers files
    normalize: bool            # a Normalize module follows pooling
    tokenizer: str             # "bert-uncased", "all-MiniLM-L6-v2" (shared testdata) or "unigram"
    hidden: int                # tiny defaults
    heads: int
    intermediate: int
    layers: int = 2
    masked_lm: bool = False    # *ForMaskedLM names: prefix + head tensors
    gamma_beta: bool = False   # LayerNorm.gamma/.beta (the original bert-base-uncased names)
    position_ids_buffer: bool = False  # "embeddings.position_ids" [1, P] i64, as old checkpoints save
    old_pooling_config: bool = False   # 1_Pooling/config.json without the newer keys
    prompts: dict | None = None        # config_sentence_transformers.json "prompts"
    max_seq_length: int = 512          # sentence_bert_config.json
    hidden_act: str = "gelu"


# Tiny sizes keep the real head dims: 32 for the small models (384 / 12 heads), 64 for the
# base ones (768 / 12). BERT layouts carry the real 30522-row vocabulary (the tokenizer's).
LAYOUTS = {
    "bert": Layout("bert", "BertModel", None, False, "bert-uncased", 128, 2, 256, masked_lm=True,
                   gamma_beta=True),
    "minilm": Layout("bert", "BertModel", "mean", True, "all-MiniLM-L6-v2", 64, 2, 128,
                     position_ids_buffer=True, old_pooling_config=True, max_seq_length=256),
    "bge": Layout("bert", "BertModel", "cls", True, "bert-uncased", 64, 2, 128),
    "e5": Layout("bert", "BertModel", "mean", True, "bert-uncased", 64, 2, 128,
                 prompts={"query": "query: ", "passage": "passage: "}),
    "gte": Layout("bert", "BertModel", "mean", False, "bert-uncased", 128, 2, 256),
    "xlmr": Layout("xlm-roberta", "XLMRobertaModel", "mean", True, "unigram", 128, 2, 256,
                   prompts={"query": "query: ", "passage": "passage: "}),
}

# Input sequences, special tokens included; a last one is max_tokens long.
SEQ_LENS = (5, 17, 2, 9)
DEFAULT_MAX_TOKENS = 64  # tiny models' max_position_embeddings (XLM-R: + pad_token_id + 1)


# ---- the model: modules named as in transformers, so state_dict() gives the real names ----

class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, ids, positions):
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads = c["num_attention_heads"]
        hidden = c["hidden_size"]
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x):  # x: [L, hidden], one sequence: every token sees every token
        n, d = x.shape[0], x.shape[1] // self.num_heads
        q = self.query(x).view(n, self.num_heads, d).transpose(0, 1)  # [heads, L, d]
        k = self.key(x).view(n, self.num_heads, d).transpose(0, 1)
        v = self.value(x).view(n, self.num_heads, d).transpose(0, 1)
        p = (q @ k.transpose(1, 2) / math.sqrt(d)).softmax(-1)        # [heads, L, L]
        return (p @ v).transpose(0, 1).reshape(n, -1)


class SelfOutput(nn.Module):  # "attention.output": dense + residual + LayerNorm
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttention(c)
        self.output = SelfOutput(c)

    def forward(self, x):
        return self.output(self.self(x), x)


def activation(name):
    return {"gelu": F.gelu,
            "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
            "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
            "relu": F.relu}[name]


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.act = activation(c["hidden_act"])

    def forward(self, x):
        return self.act(self.dense(x))


class Output(nn.Module):  # the layer's "output": dense + residual + LayerNorm
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["intermediate_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = Output(c)

    def forward(self, x):
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class EncoderStack(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])


class Pooler(nn.Module):  # BertModel's tanh pooler: in real checkpoints, unused by embedders
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])


class BertModel(nn.Module):
    def __init__(self, c, with_pooler=True):
        super().__init__()
        self.embeddings = Embeddings(c)
        self.encoder = EncoderStack(c)
        if with_pooler:
            self.pooler = Pooler(c)

    def forward(self, ids, positions):
        """Last hidden states [L, hidden] of one sequence."""
        x = self.embeddings(ids, positions)
        for layer in self.encoder.layer:
            x = layer(x)
        return x


def pool(hidden, mode):
    """[hidden] of one sequence's [L, hidden] states."""
    if mode == "cls":
        return hidden[0]
    if mode == "mean":
        return hidden.mean(0)
    if mode == "lasttoken":
        return hidden[-1]
    raise ValueError(mode)


def l2_normalize(x):  # torch.nn.functional.normalize: x / max(||x||, 1e-12)
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


# ---- configuration and files ------------------------------------------------------------------

def make_config(layout, args, vocab_size):
    """config.json with the family's real keys, at the requested size."""
    max_tokens = args.max_positions
    xlmr = layout.model_type == "xlm-roberta"
    arch = layout.architecture
    if args.masked_lm:
        arch = "XLMRobertaForMaskedLM" if xlmr else "BertForMaskedLM"
    c = {
        "architectures": [arch],
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": layout.hidden_act,
        "hidden_dropout_prob": 0.1,
        "hidden_size": args.hidden,
        "initializer_range": 0.02,
        "intermediate_size": args.intermediate,
        "layer_norm_eps": 1e-5 if xlmr else 1e-12,
        # XLM-R's table starts past the padding index: positions pad+1 .. pad+max_tokens.
        "max_position_embeddings": max_tokens + XLMR_PAD + 1 if xlmr else max_tokens,
        "model_type": layout.model_type,
        "num_attention_heads": args.heads,
        "num_hidden_layers": args.layers,
        "pad_token_id": XLMR_PAD if xlmr else 0,
        "position_embedding_type": "absolute",
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[args.weight_dtype],
        "transformers_version": "4.36.2",
        "type_vocab_size": 1 if xlmr else 2,
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    if xlmr:
        c.update(bos_token_id=XLMR_BOS, eos_token_id=XLMR_EOS, output_past=True)
    if layout.gamma_beta:
        c["gradient_checkpointing"] = False  # bert-base-uncased's config carries it
    return dict(sorted(c.items()))


def position_offset(c):
    return c["pad_token_id"] + 1 if c["model_type"] == "xlm-roberta" else 0


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_sentence_transformers_files(out_dir, layout, pooling, hidden, max_seq_length):
    """modules.json, 1_Pooling/config.json, config_sentence_transformers.json and
    sentence_bert_config.json as sentence-transformers saves them. Normalize has no files of
    its own: modules.json names its folder, which need not exist."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if layout.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    write_json(os.path.join(out_dir, "modules.json"), modules)

    pooling_config = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    if not layout.old_pooling_config:
        pooling_config.update(pooling_mode_weightedmean_tokens=False,
                              pooling_mode_lasttoken=pooling == "lasttoken", include_prompt=True)
    elif pooling == "lasttoken":
        pooling_config["pooling_mode_lasttoken"] = True
    write_json(os.path.join(out_dir, "1_Pooling", "config.json"), pooling_config)

    st_config = {"__version__": {"sentence_transformers": "2.7.0", "transformers": "4.36.2",
                                 "pytorch": "2.1.0"}}
    if layout.prompts:
        st_config.update(prompts=layout.prompts, default_prompt_name=None)
    write_json(os.path.join(out_dir, "config_sentence_transformers.json"), st_config)
    write_json(os.path.join(out_dir, "sentence_bert_config.json"),
               {"max_seq_length": max_seq_length, "do_lower_case": False})


def write_tokenizer(out_dir, layout, testdata, max_tokens):
    """tokenizer.json (+ the files transformers writes beside it). Returns the tokenizer's
    vocabulary size."""
    if layout.tokenizer == "unigram":
        tokenizer = xlmr_tokenizer.tokenizer_json()
        write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer)
        write_json(os.path.join(out_dir, "tokenizer_config.json"), {
            "bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "mask_token": "<mask>",
            "model_max_length": max_tokens, "pad_token": "<pad>", "sep_token": "</s>",
            "tokenizer_class": "XLMRobertaTokenizer", "unk_token": "<unk>"})
        write_json(os.path.join(out_dir, "special_tokens_map.json"), {
            "bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "mask_token": "<mask>",
            "pad_token": "<pad>", "sep_token": "</s>", "unk_token": "<unk>"})
        return len(tokenizer["model"]["vocab"])

    src = os.path.join(testdata, "tokenizers", layout.tokenizer)
    if not os.path.isfile(os.path.join(src, "tokenizer.json")):
        raise SystemExit(f"no tokenizer.json in {src}: pass --testdata or set PRISM_TESTDATA_DIR")
    shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))
    bert_vocab = os.path.join(testdata, "tokenizers", "bert-uncased", "vocab.txt")
    if os.path.isfile(bert_vocab):  # the same vocabulary every BERT layout here uses
        shutil.copyfile(bert_vocab, os.path.join(out_dir, "vocab.txt"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "cls_token": "[CLS]", "do_lower_case": True, "mask_token": "[MASK]",
        "model_max_length": max_tokens, "pad_token": "[PAD]", "sep_token": "[SEP]",
        "strip_accents": None, "tokenize_chinese_chars": True, "tokenizer_class": "BertTokenizer",
        "unk_token": "[UNK]"})
    write_json(os.path.join(out_dir, "special_tokens_map.json"), {
        "cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]", "sep_token": "[SEP]",
        "unk_token": "[UNK]"})
    return BERT_VOCAB_SIZE


# ---- weights ----------------------------------------------------------------------------------

def init_weights(model, c):
    """Embeddings ~ N(0, 0.5); nn.Linear's default init (uniform, bound 1/sqrt(in), weights
    and biases) keeps activations O(1), so bf16/int8 errors are relative to realistic
    magnitudes; except query and key, scaled so attention logits have std ~2: a trained
    model's peaked softmax (a flat one averages over keys and hides a wrong mask, position
    or head mapping). LayerNorm weights scatter around 1 and biases around 0, as trained
    ones do, so a missing or swapped weight shows."""
    hidden = c["hidden_size"]
    with torch.no_grad():
        for emb in (model.embeddings.word_embeddings, model.embeddings.position_embeddings,
                    model.embeddings.token_type_embeddings):
            emb.weight.normal_(0.0, 0.5)
        for layer in model.encoder.layer:
            for proj in (layer.attention.self.query, layer.attention.self.key):
                bound = 2.5 / math.sqrt(hidden)
                proj.weight.uniform_(-bound, bound)
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
                m.bias.copy_(0.1 * torch.randn(hidden))


def head_tensors(c, xlmr):
    """The pre-training head tensors a *ForMaskedLM checkpoint carries: loaders must ignore
    them. (The tied decoder weight is left out: it would double the file.)"""
    h, v = c["hidden_size"], c["vocab_size"]
    if xlmr:
        return {"lm_head.bias": torch.randn(v) * 0.1, "lm_head.dense.weight": torch.randn(h, h) * 0.05,
                "lm_head.dense.bias": torch.randn(h) * 0.1, "lm_head.layer_norm.weight": torch.ones(h),
                "lm_head.layer_norm.bias": torch.zeros(h)}
    return {"cls.predictions.bias": torch.randn(v) * 0.1,
            "cls.predictions.transform.dense.weight": torch.randn(h, h) * 0.05,
            "cls.predictions.transform.dense.bias": torch.randn(h) * 0.1,
            "cls.predictions.transform.LayerNorm.weight": torch.ones(h),
            "cls.predictions.transform.LayerNorm.bias": torch.zeros(h),
            "cls.seq_relationship.weight": torch.randn(2, h) * 0.05,
            "cls.seq_relationship.bias": torch.zeros(2)}


def checkpoint_name(name, prefix, gamma_beta):
    if gamma_beta and ".LayerNorm." in name:
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    return prefix + name if not name.startswith(("cls.", "lm_head.")) else name


def checkpoint_state(model, layout, c, masked_lm, store_dtype):
    """{checkpoint name: stored tensor}, in the family's naming."""
    xlmr = c["model_type"] == "xlm-roberta"
    prefix = ("roberta." if xlmr else "bert.") if masked_lm else ""
    state = dict(model.state_dict())
    if masked_lm:
        state.update(head_tensors(c, xlmr))
    out = {checkpoint_name(k, prefix, layout.gamma_beta): v.detach().to(store_dtype).contiguous()
           for k, v in state.items()}
    if layout.position_ids_buffer:
        out[prefix + "embeddings.position_ids"] = torch.arange(c["max_position_embeddings"])[None, :]
    return out


def model_state(state, model, layout, masked_lm, c):
    """The model's state_dict back from the checkpoint's names (what was stored, as f32)."""
    xlmr = c["model_type"] == "xlm-roberta"
    prefix = ("roberta." if xlmr else "bert.") if masked_lm else ""
    return {k: state[checkpoint_name(k, prefix, layout.gamma_beta)].to(torch.float32)
            for k in model.state_dict()}


# ---- inputs and outputs --------------------------------------------------------------------------

def make_inputs(c, tokenizer_vocab, max_tokens):
    """token_ids [T] i32 (sequences back to back: a start token, random ordinary tokens, an
    end token), cu_seqlens [S + 1] i32."""
    xlmr = c["model_type"] == "xlm-roberta"
    start, end = (XLMR_BOS, XLMR_EOS) if xlmr else (BERT_CLS, BERT_SEP)
    # Ordinary tokens only: past XLM-R's four specials (and before <mask>, the last piece),
    # past BERT's [unused*] and specials (1996 is "the").
    low, high = (4, tokenizer_vocab - 1) if xlmr else (1996, BERT_VOCAB_SIZE)
    seqs = []
    for n in SEQ_LENS + (max_tokens,):
        body = torch.randint(low, high, (n - 2,), dtype=torch.int32)
        seqs.append(torch.cat([torch.tensor([start], dtype=torch.int32), body,
                               torch.tensor([end], dtype=torch.int32)]))
    lens = [len(s) for s in seqs]
    cu = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return torch.cat(seqs), cu


def reference_outputs(model, c, token_ids, cu_seqlens, pooling, normalize):
    """float64 hidden states [T, H], pooled [S, H] and the final embeddings [S, H]."""
    offset = position_offset(c)
    hidden, pooled = [], []
    for s in range(len(cu_seqlens) - 1):
        b, e = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        positions = torch.arange(e - b) + offset
        h = model(token_ids[b:e].long(), positions)
        hidden.append(h)
        pooled.append(pool(h, pooling))
    hidden, pooled = torch.cat(hidden), torch.stack(pooled)
    return hidden, pooled, (l2_normalize(pooled) if normalize else pooled)


def resolve_sizes(layout, weight_dtype, masked_lm, hidden=None, layers=None, heads=None,
                  intermediate=None, vocab=None, max_positions=None):
    """What make_config reads: the flags given, over the layout's tiny defaults."""
    return argparse.Namespace(
        hidden=hidden or layout.hidden, layers=layers or layout.layers, heads=heads or layout.heads,
        intermediate=intermediate or layout.intermediate, vocab=vocab,
        max_positions=max_positions or DEFAULT_MAX_TOKENS, weight_dtype=weight_dtype,
        masked_lm=masked_lm or layout.masked_lm)


def generate(out_dir, layout_name, seed=prism_ref.seeding.DEFAULT_SEED, weight_dtype="f32",
             max_shard_bytes=None, masked_lm=False, pooling=None, reference=True, testdata=None,
             **sizes):
    """Writes the model directory (and reference.safetensors unless not reference) into
    out_dir. sizes: hidden, layers, heads, intermediate, vocab, max_positions (None or absent:
    the layout's tiny default). Returns the config dict."""
    layout = LAYOUTS[layout_name]
    args = resolve_sizes(layout, weight_dtype, masked_lm, **sizes)
    if args.hidden % args.heads:
        raise SystemExit(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    if pooling is not None and layout.pooling is None:
        raise SystemExit(f"layout {layout_name} has no sentence-transformers files to set --pooling in")
    pooling = pooling or layout.pooling
    testdata = testdata or os.environ.get("PRISM_TESTDATA_DIR") or os.path.join(REPO_DIR, "..", "shared", "testdata")

    prism_ref.seed_everything(seed)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer_vocab = write_tokenizer(out_dir, layout, testdata, args.max_positions)
    vocab_size = args.vocab or tokenizer_vocab
    if vocab_size < tokenizer_vocab:
        raise SystemExit(f"--vocab {vocab_size} is smaller than the tokenizer's {tokenizer_vocab} tokens")
    c = make_config(layout, args, vocab_size)

    # BertForMaskedLM drops the pooler, but bert-base-uncased's checkpoint (pre-training)
    # keeps it; XLMRobertaForMaskedLM checkpoints have none.
    model = BertModel(c, with_pooler=layout.model_type == "bert" or not args.masked_lm)
    init_weights(model, c)
    store_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    state = checkpoint_state(model, layout, c, args.masked_lm, store_dtype)
    prism_ref.write_model_dir(out_dir, c, state, max_shard_bytes)
    if layout.pooling is not None:
        write_sentence_transformers_files(out_dir, layout, pooling, c["hidden_size"],
                                          min(layout.max_seq_length, args.max_positions))
    if not reference:
        return c

    # The reference runs in float64 on exactly the stored weights.
    model.load_state_dict(model_state(state, model, layout, args.masked_lm, c))
    model.double()
    token_ids, cu_seqlens = make_inputs(c, tokenizer_vocab, args.max_positions)
    with torch.no_grad():
        hidden, pooled, embeddings = reference_outputs(model, c, token_ids, cu_seqlens,
                                                       pooling or "mean", layout.normalize)
    tensors = {"token_ids": token_ids, "cu_seqlens": cu_seqlens, "hidden": hidden.float(),
               "pooled": pooled.float(), "embeddings": embeddings.float()}
    metadata = {"generator": "bert_family.py", "layout": layout_name, "seed": str(seed),
                "pooling": pooling or "mean", "normalize": str(layout.normalize).lower(),
                "torch": torch.__version__}
    prism_ref.save_reference(out_dir, tensors, metadata)
    return c


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--layout", required=True, choices=sorted(LAYOUTS))
    parser.add_argument("--weight-dtype", choices=("f32", "bf16"), default="f32",
                        help="dtype the weights are stored in")
    parser.add_argument("--max-shard-bytes", type=int, default=None,
                        help="shard the weights (model.safetensors.index.json) above this size")
    parser.add_argument("--masked-lm", action="store_true",
                        help="*ForMaskedLM names: 'bert.'/'roberta.' prefix and head tensors")
    parser.add_argument("--pooling", choices=("cls", "mean", "lasttoken"), default=None,
                        help="override the family's sentence-transformers pooling mode")
    parser.add_argument("--no-reference", action="store_true",
                        help="write the model only (real sizes for benchmarks)")
    parser.add_argument("--testdata", default=None,
                        help="shared test data (default: $PRISM_TESTDATA_DIR or <repo>/../shared/testdata)")
    for flag, what in (("hidden", "hidden_size"), ("layers", "num_hidden_layers"),
                       ("heads", "num_attention_heads"), ("intermediate", "intermediate_size"),
                       ("vocab", "vocab_size (default: the tokenizer's)"),
                       ("max-positions", f"longest sequence in tokens, special tokens included (default {DEFAULT_MAX_TOKENS})")):
        parser.add_argument("--" + flag, type=int, default=None, help=what)
    a = parser.parse_args()
    generate(a.out, a.layout, seed=a.seed, weight_dtype=a.weight_dtype, max_shard_bytes=a.max_shard_bytes,
             masked_lm=a.masked_lm, pooling=a.pooling, reference=not a.no_reference, testdata=a.testdata,
             hidden=a.hidden, layers=a.layers, heads=a.heads, intermediate=a.intermediate, vocab=a.vocab,
             max_positions=a.max_positions)


if __name__ == "__main__":
    main()
