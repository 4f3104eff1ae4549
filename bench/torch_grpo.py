#!/usr/bin/env python3
"""A plain PyTorch GRPO loop: the reference bench/e2e_cpu.py holds tandem's step time against.

Written as a researcher would in an afternoon, with no tricks beyond the usual ones: a
Qwen3/Llama decoder in torch.nn (RMSNorm, RoPE, GQA, SwiGLU, Qwen3's q/k norms, tied
embeddings as the config says) built from a model directory's config.json, with the
weights of its model.safetensors when there is one. Each step samples --group-size
completions of each of --prompts random prompts of --prompt-len tokens, batched with a
preallocated KV cache, exactly --new-tokens tokens each (no EOS stop, so the lengths match
tandem's run with a config.json that names no EOS); scores them with a toy reward (share
of even token ids); normalises the rewards within each group; recomputes the log-probs
with grad in micro-batches of --micro-batch (logits for the response positions only) and
takes one PPO-clip (0.2 / 0.28, token mean) AdamW step with the gradient clipped to 1.

    /usr/bin/python3 bench/torch_grpo.py --model DIR [--threads 2] [--steps 7] [--warmup 2]

Output: one JSON line per step, then one with the medians and min/max of the steps after
the warm-up. Needs Debian's python3-torch (libtorch 1.13 with OpenBLAS, as tandem's build).
"""

import argparse, json, math, os, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """name -> float32 tensor. The format is an 8-byte header length, a JSON header of
    dtype/shape/offsets, then the raw data (Debian has no python3-safetensors)."""
    with open(path, "rb") as f:
        data = f.read()
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_len])
    base, tensors = 8 + header_len, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=DTYPES[info["dtype"]])
        tensors[name] = raw.reshape(info["shape"]).float()
    return tensors


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):  # x [B, H, T, D]; cos, sin [T, D]: rotate-half RoPE
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        hidden, bias = c["hidden_size"], c.get("attention_bias", False)
        self.q_proj = nn.Linear(hidden, self.heads * self.dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.dim, hidden, bias=False)
        if c["model_type"] == "qwen3":
            self.q_norm, self.k_norm = RMSNorm(self.dim, c["rms_norm_eps"]), RMSNorm(self.dim, c["rms_norm_eps"])

    def forward(self, x, cos, sin, start, cache):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.dim)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.dim)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.dim).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
        if cache is not None:  # write this chunk's keys/values, attend over everything so far
            cache[0][:, :, start:start + T], cache[1][:, :, start:start + T] = k, v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dim)
        if T > 1:
            causal = torch.ones(T, start + T, dtype=torch.bool).tril(start)
            scores = scores.masked_fill(~causal, float("-inf"))
        return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, inter = c["hidden_size"], c["intermediate_size"]
        self.input_layernorm = RMSNorm(hidden, c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(hidden, c["rms_norm_eps"])
        self.mlp = nn.ModuleDict({"gate_proj": nn.Linear(hidden, inter, bias=False),
                                  "up_proj": nn.Linear(hidden, inter, bias=False),
                                  "down_proj": nn.Linear(inter, hidden, bias=False)})

    def forward(self, x, cos, sin, start, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, start, cache)
        h, m = self.post_attention_layernorm(x), self.mlp
        return x + m["down_proj"](F.silu(m["gate_proj"](h)) * m["up_proj"](h))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight
        d = c["head_dim"]
        inv_freq = 1.0 / c.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2).float() / d)
        angles = torch.outer(torch.arange(c.get("max_position_embeddings", 4096)).float(), inv_freq)
        self.cos, self.sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()

    def forward(self, ids, start=0, caches=None):
        """Final hidden states [B, T, hidden] of ids [B, T] at positions start.."""
        x, T = self.model.embed_tokens(ids), ids.shape[1]
        cos, sin = self.cos[start:start + T], self.sin[start:start + T]
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, start, None if caches is None else caches[i])
        return self.model.norm(x)


@torch.no_grad()
def sample(model, c, prompts, new_tokens):
    """Sequences [B, P + new_tokens] and each sampled token's log-prob [B, new_tokens]."""
    B, P = prompts.shape
    shape = (B, c["num_key_value_heads"], P + new_tokens, c["head_dim"])
    caches = [(torch.empty(shape), torch.empty(shape)) for _ in range(c["num_hidden_layers"])]
    seq, logps, pos = prompts, [], 0
    hidden = model(prompts, 0, caches)[:, -1]
    for t in range(new_tokens):
        logp = model.lm_head(hidden).log_softmax(-1)  # temperature 1, no top-p/top-k
        token = torch.multinomial(logp.exp(), 1)
        logps.append(logp.gather(1, token))
        seq = torch.cat((seq, token), 1)
        if t + 1 < new_tokens:
            hidden = model(token, P + t, caches)[:, -1]
    return seq, torch.cat(logps, 1)


def train(model, opt, seq, old_logp, adv, prompt_len, micro_batch, precision="fp32"):
    """One PPO-clip AdamW step over the whole batch, accumulated over micro-batches.
    precision bf16: the forward under CPU autocast (bf16 products, float32 parameters,
    gradients and AdamW state), the log-softmax in float32."""
    B, N = old_logp.shape
    for i in range(0, B, micro_batch):
        s, old, a = seq[i:i + micro_batch], old_logp[i:i + micro_batch], adv[i:i + micro_batch, None]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            hidden = model(s[:, :-1])[:, prompt_len - 1:]  # the positions that predict the response
            logits = model.lm_head(hidden)
        logp = logits.float().log_softmax(-1).gather(2, s[:, prompt_len:, None]).squeeze(2)
        ratio = (logp - old).exp()
        loss = -torch.min(ratio * a, ratio.clamp(1 - 0.2, 1 + 0.28) * a).sum() / (B * N)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def train_only(args, c, model, opt, weights):
    """Training steps alone on one fixed batch of random sequences: train tokens/s."""
    B, P, N = args.prompts * args.group_size, args.prompt_len, args.new_tokens
    seq = torch.randint(c["vocab_size"], (B, P + N))
    old_logp = torch.full((B, N), -5.5)
    adv = torch.randint(2, (B,)).float() * 2 - 1
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        train(model, opt, seq, old_logp, adv, P, args.micro_batch, args.precision)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"bench": "torch_grpo", "summary": True, "train_only": True, "model": args.model,
                      "weights": weights, "threads": args.threads, "precision": args.precision, "samples": B,
                      "prompt_len": P,
                      "new_tokens": N, "micro_batch": args.micro_batch, "steps_measured": len(times),
                      "median_train_s": round(statistics.median(times), 5), "min_train_s": round(min(times), 5),
                      "max_train_s": round(max(times), 5),
                      "train_tokens_per_s": round(B * N / statistics.median(times), 1), "torch": torch.__version__}),
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="model directory (config.json, optional model.safetensors)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    p.add_argument("--prompt-len", type=int, default=4, help="tokens per prompt")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens sampled per completion")
    p.add_argument("--micro-batch", type=int, default=32, help="samples per forward/backward")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="training compute dtype (bf16: CPU autocast over float32 parameters)")
    p.add_argument("--steps", type=int, default=7, help="measured steps")
    p.add_argument("--warmup", type=int, default=2, help="steps run before the measured ones")
    p.add_argument("--train-only", action="store_true",
                   help="time only the training step, on fixed random sequences (bench/learner_cpu's reference)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    with open(os.path.join(args.model, "config.json")) as f:
        c = json.load(f)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    model = Decoder(c)
    weights_file = os.path.join(args.model, "model.safetensors")
    weights = "model.safetensors" if os.path.exists(weights_file) else "random init (timing does not depend on values)"
    if os.path.exists(weights_file):
        missing, unexpected = model.load_state_dict(read_safetensors(weights_file), strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head is absent when tied
            raise SystemExit(f"torch_grpo: {weights_file}: missing {missing}, unexpected {unexpected}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    if args.train_only:
        return train_only(args, c, model, opt, weights)
    G = args.group_size
    rows = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        prompts = torch.randint(c["vocab_size"], (args.prompts, args.prompt_len)).repeat_interleave(G, 0)
        seq, old_logp = sample(model, c, prompts, args.new_tokens)
        t1 = time.perf_counter()
        reward = (seq[:, args.prompt_len:] % 2 == 0).float().mean(1).view(-1, G)
        adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).view(-1)
        t2 = time.perf_counter()
        train(model, opt, seq, old_logp, adv, args.prompt_len, args.micro_batch, args.precision)
        t3 = time.perf_counter()
        row = {"bench": "torch_grpo", "step": step + 1, "warmup": step < args.warmup, "rollout_s": round(t1 - t0, 5),
               "train_s": round(t3 - t2, 5), "step_s": round(t3 - t0, 5), "reward_mean": round(reward.mean().item(), 4)}
        print(json.dumps(row), flush=True)
        if step >= args.warmup:
            rows.append(row)
    summary = {"bench": "torch_grpo", "summary": True, "model": args.model, "weights": weights,
               "params": sum(t.numel() for t in model.parameters()), "threads": args.threads, "precision": args.precision,
               "prompts": args.prompts, "group_size": G, "prompt_len": args.prompt_len,
               "new_tokens": args.new_tokens, "micro_batch": args.micro_batch, "steps_measured": len(rows),
               "torch": torch.__version__}
    for phase in ("rollout_s", "train_s", "step_s"):
        values = [r[phase] for r in rows]
        summary.update({f"median_{phase}": round(statistics.median(values), 5),
                        f"min_{phase}": min(values), f"max_{phase}": max(values)})
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
