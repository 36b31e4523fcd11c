"""Peer for `pagoda bench throughput` on the Llama-3-8B-shaped dummy model: Hugging Face transformers
`generate` (greedy, bf16, random weights, EOS ignored) on the same work: N random prompts of IN tokens, OUT
new tokens each, in batches of B (all prompts have the same length, so no padding). Prints output tokens/s;
writes $OUT/hf_throughput.csv.  Usage: hf_throughput.py N IN OUT B"""
import os
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    n, inp, out, b = (int(x) for x in sys.argv[1:5])
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    prompts = torch.randint(0, cfg.vocab_size, (n, inp), device="cuda")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(prompts[:2], attention_mask=torch.ones_like(prompts[:2]), max_new_tokens=4, min_new_tokens=4, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        produced = 0
        for i in range(0, n, b):
            ids = prompts[i:i + b]
            res = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=out, min_new_tokens=out, **kw)
            produced += (res.shape[1] - inp) * res.shape[0]
            print(f"  batch {i // b + 1}: {res.shape[0]} requests, {time.perf_counter() - t0:.1f} s", flush=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    assert produced == n * out, produced
    print(f"hf transformers generate: {n} requests {inp}+{out} tokens in batches of {b}: {dt:.1f} s, "
          f"{n / dt:.2f} requests/s, {produced / dt:.1f} output tokens/s", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "hf_throughput.csv"), "w") as f:
        f.write("num_prompts,input_len,output_len,batch,seconds,output_tokens_per_s\n")
        f.write(f"{n},{inp},{out},{b},{dt:.3f},{produced / dt:.2f}\n")


if __name__ == "__main__":
    main()
