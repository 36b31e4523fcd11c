"""Peer for `pagoda bench latency` on the Llama-3-8B-shaped dummy model: Hugging Face transformers
`generate` (greedy, bf16, random weights, EOS ignored) on the same work: a batch of random 128-token
prompts, 256 new tokens each. Prints tokens/s per batch size; writes $OUT/hf_generate.csv."""
import os
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    batches = [int(x) for x in (sys.argv[1:] or ["1", "8", "32"])]
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    rows = []
    for b in batches:
        ids = torch.randint(0, cfg.vocab_size, (b, 128), device="cuda")
        mask = torch.ones_like(ids)
        kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=256, min_new_tokens=256, **kw)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        assert out.shape[1] == 128 + 256, out.shape
        tps = b * 256 / dt
        print(f"hf transformers generate batch={b:3d} 128+256 tokens: {dt:.2f} s, {tps:.1f} output tokens/s", flush=True)
        rows.append(f"{b},{dt:.4f},{tps:.2f}")
    with open(os.path.join(os.environ.get("OUT", "."), "hf_generate.csv"), "w") as f:
        f.write("batch,seconds,output_tokens_per_s\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
