"""A small tokenizer.json in XLM-RoBERTa's layout, for the tiny xlmr models of
bert_family.py: a Unigram model whose first pieces are XLM-R's special tokens (<s>=0
<pad>=1 </s>=2 <unk>=3) and whose last is <mask>; an NFKC normaliser (the real file has
SentencePiece's precompiled nmt_nfkc charsmap, which approximates it) that also folds runs
of spaces; a Metaspace pre-tokenizer and decoder ("▁", prefix always); and the post-processor
"<s> $A </s>" / "<s> $A </s> </s> $B </s>". The vocabulary is a few hundred pieces of
several languages, with log-probability scores that make whole words win over spelling.
"""

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
UNK_ID = 3
MASK = "<mask>"

_WORDS = """the of and to in is a that for it on with as was are be this by at from
hello world query passage how what where when who why which many much long short
bonjour le la les de des et est un une monde merci oui non
hola el los las mundo gracias que por para con una
der die das und ist nicht ein eine welt danke ja nein
model vector search text embedding token sentence document language""".split()
_SUFFIXES = "es ed ing er est ly tion ment ness en ung ción ité".split()
_PUNCTUATION = list(",.-'\":!?();")
_CHARS = (list("abcdefghijklmnopqrstuvwxyz") + list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
          + list("0123456789") + list("éèêàâçüöäñßíóú"))


def vocab():
    """[[piece, score], ...] in id order; every piece once (a Unigram model rejects repeats)."""
    pieces = [[p, 0.0] for p in SPECIALS]
    pieces += [[p, -3.0 - 0.1 * i] for i, p in enumerate(_PUNCTUATION)]
    pieces.append(["\u2581", -4.0])
    pieces += [["\u2581" + w, -5.0 - 0.02 * i] for i, w in enumerate(_WORDS)]
    pieces += [[w, -7.0 - 0.02 * i] for i, w in enumerate(_SUFFIXES)]
    pieces += [[c, -9.0 - 0.01 * i] for i, c in enumerate(_CHARS)]
    pieces.append([MASK, 0.0])
    assert len({p for p, _ in pieces}) == len(pieces), "repeated piece"
    return pieces


def _added(i, content, lstrip=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json():
    """The tokenizer.json content as a dict."""
    v = vocab()
    mask_id = len(v) - 1
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}

    def special(name, type_id=0):
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def seq(name, type_id=0):
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(i, t) for i, t in enumerate(SPECIALS)] + [_added(mask_id, MASK, lstrip=True)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("<s>"), seq("A"), special("</s>")],
            "pair": [special("<s>"), seq("A"), special("</s>"), special("</s>"), seq("B"), special("</s>")],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]},
            },
        },
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": UNK_ID, "vocab": v, "byte_fallback": False},
    }
