#!/usr/bin/env python3
"""Our engine (`tandem generate`) against Hugging Face transformers, greedy, on small
random-weight Qwen3 models (tied and untied embeddings), fp32 and bf16 weights.

For each model variant and dtype: transformers writes the model with save_pretrained;
`tandem generate --temperature 0 --json --device D --dtype fp32|bf16` generates from two
prompts (batched together, different lengths); then transformers runs ONE forward over
prompt + generated tokens in float64 on the same (dtype-rounded) weights and gives the
reference: the log-softmax log-prob of every generated token and the greedy token at
every position. One JSON line per (variant, dtype, prompt):

  {"check":"hf_compare","model":"qwen3-untied","dtype":"bf16","device":"cuda","prompt":0,
   "tokens":32,"max_abs_logprob_diff":...,"mean_abs_logprob_diff":...,"tolerance":0.02,
   "first_greedy_mismatch":null | {"index":i,"tandem":t,"reference":r,"margin":m},
   "peer_max_abs_logprob_diff":...,   # transformers itself in that dtype vs the reference
   "pass":true}

then {"summary":"hf_compare","pass":...,"checks":N,"failed":[...]}. Exit status 1 if any
check failed, 77 (skip) if torch or transformers cannot be imported.

Tolerances (absolute, on log-probs): fp32 1e-4, bf16 2e-2 (--tol-fp32, --tol-bf16).
A greedy mismatch fails only when it is not a near tie: when the reference's log-prob of
its own greedy token exceeds that of tandem's token by more than the tolerance ("margin").

The model directory also gets tandem's byte-level tokenizer (from `tandem init-model`),
which `tandem generate` needs (it decodes what it generates, so the model's vocabulary is
the tokenizer's 259 ids); transformers only sees token ids. config.json gets
top-level "rope_theta" and "torch_dtype" added where transformers (v5) wrote them only as
"rope_parameters"/"dtype", as checkpoints on the Hub have them; a "config_format" line
says whether that was needed.

  python3 tests/gpu/hf_compare.py --tandem build-gpu/controller/tandem --device cuda
  python3 tests/gpu/hf_compare.py --tandem build/controller/tandem --device cpu   # no GPU
"""
import argparse
import copy
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile

LONG_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 2,
    "Reinforcement learning from feedback: ",
]


def emit(obj):
    print(json.dumps(obj), flush=True)


def log(msg):
    print(f"hf_compare: {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tandem", default="build-gpu/controller/tandem", help="the tandem binary")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="tandem's --device and where transformers runs the reference")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--variants", default="untied,tied", help="comma-separated: untied, tied")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--tol-fp32", type=float, default=1e-4)
    p.add_argument("--tol-bf16", type=float, default=2e-2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-std", type=float, default=0.02, help="weights ~ N(0, init_std) (transformers' default)")
    p.add_argument("--keep", default="", help="write the model directories here and keep them")
    p.add_argument("--no-device-flags", action="store_true",
                   help="call tandem generate without --device/--dtype (builds from before those flags)")
    return p.parse_args()


def tokenizer_vocab_size(tokenizer_dir):
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def model_config(transformers, tied, vocab_size, init_std):
    kwargs = dict(
        vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
        rms_norm_eps=1e-6, tie_word_embeddings=tied, attention_bias=False, hidden_act="silu",
        initializer_range=init_std, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        use_sliding_window=False, attn_implementation="eager")
    theta = 1_000_000.0
    params = inspect.signature(transformers.Qwen3Config.__init__).parameters
    if "rope_parameters" in params:  # transformers 5
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        kwargs["rope_theta"] = theta
    return transformers.Qwen3Config(**kwargs)


def rope_theta_of(config):
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    return float(config.rope_theta)


def save_model(model, out_dir, dtype_name, theta, tokenizer_dir):
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:  # transformers 5 always writes safetensors
        model.save_pretrained(out_dir)
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    added = {}
    if "rope_theta" not in cfg:
        added["rope_theta"] = theta
    if "torch_dtype" not in cfg:
        added["torch_dtype"] = {"fp32": "float32", "bf16": "bfloat16"}[dtype_name]
    cfg.update(added)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))
    return added


def run(cmd, timeout=300):
    log(" ".join(cmd))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def tandem_generate(args, model_dir, dtype_name):
    base = [args.tandem, "generate", "--model", model_dir, "--temperature", "0",
            "--max-new-tokens", str(args.max_new_tokens), "--json"]
    for p in PROMPTS:
        base += ["--prompt", p]
    flags = [] if args.no_device_flags else ["--device", args.device, "--dtype", dtype_name]
    r = run(base + flags)
    if r.returncode == 2 and flags and "--dtype" in r.stderr and dtype_name in r.stderr:
        # A build whose --dtype takes init-model's spellings.
        log(f"tandem generate rejects --dtype {dtype_name}; trying {LONG_DTYPE[dtype_name]}")
        flags = ["--device", args.device, "--dtype", LONG_DTYPE[dtype_name]]
        r = run(base + flags)
    if r.returncode != 0 and flags and args.device == "cpu" and dtype_name == "fp32" and (
            "--device" in r.stderr or "--dtype" in r.stderr):
        log("tandem generate rejects --device/--dtype; CPU fp32 is its default: retrying without them")
        r = run(base)
    if r.returncode != 0:
        raise RuntimeError(f"tandem generate exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    samples = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            s = json.loads(line)
            samples[int(s["prompt"])] = s
    if sorted(samples) != list(range(len(PROMPTS))):
        raise RuntimeError(f"tandem generate printed samples for prompts {sorted(samples)}: {r.stdout[-1000:]}")
    log(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "tandem generate: no stderr")
    return samples


def prompt_ids(args, model_dir, text):
    r = run([args.tandem, "tokenize", "--tokenizer", model_dir, "--text", text])
    if r.returncode != 0:
        raise RuntimeError(f"tandem tokenize exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def token_logprobs(torch, model, ids, n_prompt, device):
    """log-softmax log-probs of every position's next token, positions n_prompt-1 .. end-1."""
    with torch.no_grad():
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x, use_cache=False).logits[0].double()
    lp = torch.log_softmax(logits[n_prompt - 1: len(ids) - 1], dim=-1)
    return lp  # [generated, vocab]


def compare(torch, args, variant, dtype_name, ref_model, peer_model, model_dir, tol, added):
    samples = tandem_generate(args, model_dir, dtype_name)
    results = []
    for i, text in enumerate(PROMPTS):
        s = samples[i]
        prompt = prompt_ids(args, model_dir, text)
        gen = [int(t) for t in s["token_ids"]]
        row = {"check": "hf_compare", "model": f"qwen3-{variant}", "dtype": dtype_name, "device": args.device,
               "prompt": i, "prompt_tokens": len(prompt), "tokens": len(gen), "tolerance": tol,
               "finish_reason": s.get("finish_reason")}
        if not gen:
            row.update({"pass": False, "error": "tandem generated no tokens"})
            results.append(row)
            continue
        ids = prompt + gen
        ref = token_logprobs(torch, ref_model, ids, len(prompt), args.device)
        peer = token_logprobs(torch, peer_model, ids, len(prompt), args.device)
        gen_t = torch.tensor(gen, device=ref.device).unsqueeze(1)
        ref_lp = ref.gather(1, gen_t).squeeze(1)
        peer_lp = peer.gather(1, gen_t).squeeze(1)
        ours = torch.tensor([float(v) for v in s["logprobs"]], dtype=torch.float64, device=ref.device)
        diff = (ours - ref_lp).abs()
        ref_greedy = ref.argmax(dim=1)
        mismatch = None
        hard_mismatch = False
        for k in range(len(gen)):
            if int(ref_greedy[k]) != gen[k]:
                margin = float(ref[k, ref_greedy[k]] - ref[k, gen[k]])
                if mismatch is None:
                    mismatch = {"index": k, "tandem": gen[k], "reference": int(ref_greedy[k]), "margin": margin}
                if margin > tol:
                    hard_mismatch = True
        row.update({
            "max_abs_logprob_diff": float(diff.max()),
            "mean_abs_logprob_diff": float(diff.mean()),
            "argmax_diff_position": int(diff.argmax()),
            "first_greedy_mismatch": mismatch,
            "peer_max_abs_logprob_diff": float((peer_lp - ref_lp).abs().max()),
            "length_ok": len(gen) == args.max_new_tokens,
            "config_keys_added": sorted(added),
        })
        row["pass"] = bool(row["max_abs_logprob_diff"] <= tol and not hard_mismatch and row["length_ok"]
                           and len(s["logprobs"]) == len(gen))
        results.append(row)
    return results


def main():
    args = parse_args()
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001
        emit({"check": "hf_compare", "skipped": f"cannot import torch/transformers: {e}"})
        return 77
    if args.device == "cuda" and not torch.cuda.is_available():
        emit({"check": "hf_compare", "skipped": "torch sees no CUDA device"})
        return 77
    if not os.access(args.tandem, os.X_OK):
        emit({"check": "hf_compare", "error": f"no tandem binary at {args.tandem}"})
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}")

    work = args.keep or tempfile.mkdtemp(prefix="hf_compare-")
    os.makedirs(work, exist_ok=True)
    tok_dir = os.path.join(work, "tokenizer")
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        shutil.rmtree(tok_dir, ignore_errors=True)
        r = run([args.tandem, "init-model", "--preset", "tiny", "--out", tok_dir])
        if r.returncode != 0:
            emit({"check": "hf_compare", "error": f"tandem init-model failed: {r.stderr.strip()}"})
            return 1

    # tandem decodes what it generates, so the model's vocabulary is the tokenizer's (259
    # byte-level ids: an odd size, which the GPU kernels must handle too).
    vocab_size = tokenizer_vocab_size(tok_dir)
    tols = {"fp32": args.tol_fp32, "bf16": args.tol_bf16}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    all_rows = []
    format_reported = False
    try:
        for variant in [v for v in args.variants.split(",") if v]:
            config = model_config(transformers, tied=(variant == "tied"), vocab_size=vocab_size,
                                  init_std=args.init_std)
            theta = rope_theta_of(config)
            torch.manual_seed(args.seed)
            base = transformers.Qwen3ForCausalLM(config).eval()  # fp32, CPU
            with torch.no_grad():  # norms away from 1, so a norm that is skipped shows
                for name, p in base.named_parameters():
                    if "norm" in name:
                        p.copy_(1.0 + 0.1 * torch.randn_like(p))
            for dtype_name in [d for d in args.dtypes.split(",") if d]:
                # Cast the parameters only: buffers such as RoPE's inv_freq stay float32 (a
                # whole-module .to(bfloat16) would round them, which no engine does).
                model = copy.deepcopy(base)
                with torch.no_grad():
                    for p in model.parameters():
                        p.data = p.data.to(dtypes[dtype_name])
                model_dir = os.path.join(work, f"qwen3-{variant}-{dtype_name}")
                shutil.rmtree(model_dir, ignore_errors=True)
                added = save_model(model, model_dir, dtype_name, theta, tok_dir)
                if not format_reported:
                    emit({"check": "config_format", "transformers": transformers.__version__,
                          "keys_added_for_tandem": sorted(added),
                          "note": "transformers wrote no top-level rope_theta/torch_dtype: does tandem read "
                                  "rope_parameters/dtype? (it defaults rope_theta to 10000)" if added else "none needed"})
                    format_reported = True
                # Reference: float64 on the dtype-rounded weights; peer: transformers in that dtype.
                ref_model = copy.deepcopy(base).to(dtype=torch.float64)
                with torch.no_grad():
                    for r, p in zip(ref_model.parameters(), model.parameters()):
                        r.copy_(p.to(torch.float64))
                ref_model = ref_model.to(args.device)
                peer_model = model.to(args.device)
                try:
                    rows = compare(torch, args, variant, dtype_name, ref_model, peer_model, model_dir,
                                   tols[dtype_name], added)
                except Exception as e:  # noqa: BLE001 - one failing case must not hide the others
                    rows = [{"check": "hf_compare", "model": f"qwen3-{variant}", "dtype": dtype_name,
                             "device": args.device, "pass": False, "error": f"{type(e).__name__}: {e}"}]
                for row in rows:
                    emit(row)
                all_rows += rows
                del ref_model, peer_model, model
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    failed = [f"{r['model']}/{r['dtype']}/prompt{r.get('prompt', '?')}" for r in all_rows if not r.get("pass")]
    emit({"summary": "hf_compare", "pass": not failed and bool(all_rows), "checks": len(all_rows), "failed": failed,
          "tolerances": tols})
    return 0 if not failed and all_rows else 1


if __name__ == "__main__":
    sys.exit(main())
