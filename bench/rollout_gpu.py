#!/usr/bin/env python3
"""Rollout throughput on the GPU: our engine against Hugging Face transformers `generate`,
in one run, on random-weight bf16 models of the real Qwen3-0.6B and Qwen3-8B shapes.

For each model: transformers builds it from its config on the GPU in bf16 and writes it
with save_pretrained to a local temporary directory; then
  (a) transformers: prefill tokens/s (one forward of --prefill-tokens tokens as
      batch x --prompt-len, logits of the last position only) and, for each batch size,
      greedy `generate` of --new-tokens tokens after a --prompt-len random prompt (EOS
      never stops it: the config has none, and min_new_tokens = max_new_tokens).
      Decode tokens/s = batch * (new_tokens - 1) / (time(new_tokens) - time(1 token)),
      so prefill is not counted in it; e2e_tokens_per_s counts everything;
  (b) ours: `build-gpu/bench/rollout_gpu --model DIR --dtype bf16 --batches ...`, whose
      JSON lines {"bench":"rollout_gpu","phase":"decode"|"prefill","batch":B,
      "tokens_per_s":X,"seconds":S,"weight_bytes":W,"kv_bytes_per_step":K,...} (or
      {"skipped":...}) are passed through with "model" added;
  (c) the copy bandwidth of this GPU, measured in the same run (bytes read + written).
Then one line per (model, phase, batch) with ours/HF, and for decode the roofline
fraction = (weight_bytes + kv_bytes_per_step) * steps / seconds / copy_bandwidth, where
steps / seconds = tokens_per_s / batch: 1.0 would be reading every weight and the KV
cache once per step at copy speed. For transformers the same fraction is computed from the
model's own byte counts (weights + the mean KV cache over the decode).

Output: JSON lines on stdout (bench.jsonl), progress and a table on stderr. Exit 0 when
everything ran or was skipped with a reason (OOM, time budget, no binary); 1 on an error.

  python3 bench/rollout_gpu.py                       # both models, ~6 minutes on an H100
  python3 bench/rollout_gpu.py --models 0.6b --time-budget 120
"""
import argparse
import gc
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

MODELS = {
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
               head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False),
}
# Rough seconds each model needs here (create + save + transformers + ours), to decide
# whether to start it within --time-budget.
MIN_SECONDS = {"0.6b": 60, "8b": 170}
T0 = time.time()


def emit(obj):
    print(json.dumps(obj), flush=True)


def log(msg):
    print(f"rollout_gpu.py [{time.time() - T0:6.1f}s]: {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tandem-bench", default="build-gpu/bench/rollout_gpu", help="our C++ benchmark binary")
    p.add_argument("--tandem", default="", help="tandem binary, for the tokenizer files (default: next to --tandem-bench)")
    p.add_argument("--models", default="0.6b,8b")
    p.add_argument("--batches", default="1,32,256")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--reps", type=int, default=3, help="our binary's repetitions")
    p.add_argument("--hf-reps", type=int, default=1, help="timed transformers repetitions (best of)")
    p.add_argument("--time-budget", type=float, default=360, help="seconds for the whole run")
    p.add_argument("--workdir", default="", help="where model directories go (default: a temporary directory)")
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--skip-ours", action="store_true")
    return p.parse_args()


def left(args):
    return args.time_budget - (time.time() - T0)


def sync(torch):
    torch.cuda.synchronize()


def copy_bandwidth(torch):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    a.random_(0, 255)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    sync(torch)
    seconds = start.elapsed_time(end) / 1e3
    bw = 2 * n * reps / seconds
    del a, b
    torch.cuda.empty_cache()
    return bw, seconds


def make_config(transformers, spec):
    kwargs = dict(spec, max_position_embeddings=40960, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                  use_sliding_window=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    theta = 1_000_000.0
    if "rope_parameters" in inspect.signature(transformers.Qwen3Config.__init__).parameters:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        kwargs["rope_theta"] = theta
    return transformers.Qwen3Config(**kwargs), theta


def build_model(torch, transformers, config):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    return model.to(device="cuda", dtype=torch.bfloat16).eval()


def save_model(model, out_dir, theta, tokenizer_dir):
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:
        model.save_pretrained(out_dir)
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.setdefault("rope_theta", theta)  # transformers 5 writes it only inside rope_parameters
    cfg.setdefault("torch_dtype", "bfloat16")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    if tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))


def byte_counts(config, model, batch, context):
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2  # K and V, bf16
    return weight_bytes, kv_per_token * batch * context


def is_oom(torch, e):
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    return isinstance(e, oom) or "out of memory" in str(e).lower()


def hf_prefill(torch, model, args, vocab):
    batch = max(1, args.prefill_tokens // args.prompt_len)
    ids = torch.randint(0, vocab, (batch, args.prompt_len), device="cuda")

    def forward():
        with torch.no_grad():
            for kw in ({"logits_to_keep": 1}, {"num_logits_to_keep": 1}, {}):
                try:
                    return model(input_ids=ids, use_cache=True, **kw)
                except TypeError:
                    continue
    forward()
    best = float("inf")
    for _ in range(2):
        sync(torch)
        t = time.perf_counter()
        out = forward()
        sync(torch)
        best = min(best, time.perf_counter() - t)
        del out
    return batch * args.prompt_len / best, best, batch


def hf_generate_seconds(torch, model, ids, new_tokens):
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                  attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        sync(torch)
        t = time.perf_counter()
        out = model.generate(ids, **kwargs)
        sync(torch)
        seconds = time.perf_counter() - t
    generated = out.shape[1] - ids.shape[1]
    del out
    return seconds, generated


def hf_decode(torch, model, config, args, batch):
    ids = torch.randint(0, config.vocab_size, (batch, args.prompt_len), device="cuda")
    hf_generate_seconds(torch, model, ids, 4)  # warm-up
    seconds, generated = min(hf_generate_seconds(torch, model, ids, args.new_tokens)
                             for _ in range(max(1, args.hf_reps)))
    one = min(hf_generate_seconds(torch, model, ids, 1)[0] for _ in range(2))
    decode_seconds = max(seconds - one, 1e-9)
    return {
        "tokens_per_s": batch * (generated - 1) / decode_seconds,
        "e2e_tokens_per_s": batch * generated / seconds,
        "generated": generated, "seconds_full": seconds, "seconds_prefill_only": one,
        "decode_seconds": decode_seconds,
    }


def run_ours(args, model_name, model_dir, timeout):
    cmd = [args.tandem_bench, "--model", model_dir, "--dtype", "bf16", "--batches", args.batches,
           "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
           "--prefill-tokens", str(args.prefill_tokens), "--reps", str(args.reps)]
    log(" ".join(cmd) + f"  (timeout {timeout:.0f} s)")
    rows = []
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        r = None
        emit({"bench": "rollout_gpu", "model": model_name, "error": f"timed out after {timeout:.0f} s"})
    else:
        out = r.stdout
        if r.stderr:
            sys.stderr.write(r.stderr[-4000:])
        if r.returncode != 0:
            emit({"bench": "rollout_gpu", "model": model_name, "error": f"exit {r.returncode}",
                  "stderr_tail": r.stderr[-1000:]})
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        row.setdefault("model", model_name)
        emit(row)
        rows.append(row)
    return rows, (r is not None and r.returncode == 0)


def main():
    args = parse_args()
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001
        emit({"bench": "rollout_gpu_py", "skipped": f"cannot import torch/transformers: {e}"})
        return 0
    if not torch.cuda.is_available():
        emit({"bench": "rollout_gpu_py", "skipped": "torch sees no CUDA device"})
        return 0
    device_name = torch.cuda.get_device_name(0)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {device_name}")
    batches = [int(b) for b in args.batches.split(",") if b]

    bw, bw_seconds = copy_bandwidth(torch)
    emit({"bench": "copy_bandwidth", "device": device_name, "bytes_read_plus_written_per_s": bw,
          "tb_per_s": bw / 1e12, "seconds": bw_seconds})
    log(f"copy bandwidth {bw / 1e12:.2f} TB/s (read + write)")

    have_ours = os.access(args.tandem_bench, os.X_OK) and not args.skip_ours
    if not have_ours and not args.skip_ours:
        emit({"bench": "rollout_gpu", "skipped": f"no binary at {args.tandem_bench}"})

    work = args.workdir or tempfile.mkdtemp(prefix="rollout_gpu-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    tandem = args.tandem or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.tandem_bench))),
                                         "controller", "tandem")
    tokenizer_dir = ""
    if os.access(tandem, os.X_OK):
        tokenizer_dir = os.path.join(work, "tokenizer")
        r = subprocess.run([tandem, "init-model", "--preset", "tiny", "--out", tokenizer_dir],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log(f"tandem init-model failed ({r.stderr.strip()}): model directories get no tokenizer")
            tokenizer_dir = ""

    errors = 0
    table = []
    try:
        for name in [m for m in args.models.split(",") if m]:
            if left(args) < MIN_SECONDS.get(name, 60):
                emit({"bench": "rollout_gpu_py", "model": f"qwen3-{name}",
                      "skipped": f"time budget: {left(args):.0f} s left of {args.time_budget:.0f}"})
                continue
            model_name = f"qwen3-{name}"
            config, theta = make_config(transformers, MODELS[name])
            t = time.time()
            torch.manual_seed(0)
            model = build_model(torch, transformers, config)
            n_params = sum(p.numel() for p in model.parameters())
            model_dir = os.path.join(work, model_name)
            shutil.rmtree(model_dir, ignore_errors=True)
            t_build = time.time() - t
            save_model(model, model_dir, theta, tokenizer_dir)
            emit({"bench": "rollout_gpu_py", "model": model_name, "parameters": n_params,
                  "build_seconds": t_build, "save_seconds": time.time() - t - t_build})
            log(f"{model_name}: {n_params / 1e9:.2f} B parameters, built in {t_build:.1f} s, saved in "
                f"{time.time() - t - t_build:.1f} s")

            hf = {}
            if not args.skip_hf:
                try:
                    tps, seconds, pb = hf_prefill(torch, model, args, config.vocab_size)
                    row = {"bench": "rollout_gpu_hf", "model": model_name, "phase": "prefill", "batch": pb,
                           "prompt_len": args.prompt_len, "tokens_per_s": tps, "seconds": seconds}
                    emit(row)
                    hf[("prefill", None)] = row
                except Exception as e:  # noqa: BLE001
                    emit({"bench": "rollout_gpu_hf", "model": model_name, "phase": "prefill",
                          "skipped" if is_oom(torch, e) else "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    torch.cuda.empty_cache()
                for b in batches:
                    reserve = 90 if have_ours else 10
                    if left(args) < reserve:
                        emit({"bench": "rollout_gpu_hf", "model": model_name, "phase": "decode", "batch": b,
                              "skipped": "time budget"})
                        continue
                    try:
                        r = hf_decode(torch, model, config, args, b)
                        w, k = byte_counts(config, model, b, args.prompt_len + args.new_tokens / 2)
                        row = {"bench": "rollout_gpu_hf", "model": model_name, "phase": "decode", "batch": b,
                               "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, **r,
                               "weight_bytes": w, "kv_bytes_per_step": k,
                               "roofline_fraction": (w + k) * r["tokens_per_s"] / b / bw}
                        emit(row)
                        hf[("decode", b)] = row
                        log(f"{model_name} HF decode batch {b}: {r['tokens_per_s']:.0f} tokens/s")
                    except Exception as e:  # noqa: BLE001
                        emit({"bench": "rollout_gpu_hf", "model": model_name, "phase": "decode", "batch": b,
                              "skipped" if is_oom(torch, e) else "error": f"{type(e).__name__}: {str(e)[:300]}"})
                        if not is_oom(torch, e):
                            errors += 1
                    gc.collect()
                    torch.cuda.empty_cache()
            del model
            gc.collect()
            torch.cuda.empty_cache()

            if have_ours:
                timeout = max(30.0, left(args) - 5)
                rows, ok = run_ours(args, model_name, model_dir, timeout)
                errors += 0 if ok else 1
                for row in rows:
                    if "tokens_per_s" not in row or "phase" not in row:
                        continue
                    key = ("prefill", None) if row["phase"] == "prefill" else ("decode", row.get("batch"))
                    ratio = {"bench": "rollout_gpu_ratio", "model": model_name, "phase": row["phase"],
                             "batch": row.get("batch"), "ours_tokens_per_s": row["tokens_per_s"],
                             "hf_tokens_per_s": hf[key]["tokens_per_s"] if key in hf else None}
                    ratio["ours_over_hf"] = (row["tokens_per_s"] / ratio["hf_tokens_per_s"]
                                             if ratio["hf_tokens_per_s"] else None)
                    if row["phase"] == "decode" and row.get("batch") and "weight_bytes" in row:
                        per_step = row["weight_bytes"] + row.get("kv_bytes_per_step", 0)
                        ratio["roofline_fraction"] = per_step * row["tokens_per_s"] / row["batch"] / bw
                    emit(ratio)
                    table.append(ratio)
            for key, row in hf.items():
                table.append({"model": model_name, "phase": key[0], "batch": key[1] or row.get("batch"),
                              "hf_tokens_per_s": row["tokens_per_s"], "hf_only": True,
                              "roofline_fraction": row.get("roofline_fraction")})
            shutil.rmtree(model_dir, ignore_errors=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print(f"{'model':12} {'phase':8} {'batch':>5} {'ours tok/s':>12} {'HF tok/s':>12} {'ours/HF':>8} {'roofline':>8}",
          file=sys.stderr)
    for r in table:
        def fmt(v, f):
            return format(v, f) if isinstance(v, (int, float)) else "-"
        print(f"{r['model']:12} {r['phase']:8} {fmt(r.get('batch'), '5d'):>5} "
              f"{fmt(r.get('ours_tokens_per_s'), '12.0f'):>12} {fmt(r.get('hf_tokens_per_s'), '12.0f'):>12} "
              f"{fmt(r.get('ours_over_hf'), '8.2f'):>8} {fmt(r.get('roofline_fraction'), '8.3f'):>8}"
              f"{'  (HF)' if r.get('hf_only') else ''}", file=sys.stderr)
    log(f"done in {time.time() - T0:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
