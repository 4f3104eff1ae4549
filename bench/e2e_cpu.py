#!/usr/bin/env python3
"""End-to-end CPU benchmark: whole RL steps through the `tandem` binary.

--mode torch (the default; issue 15's goal: tandem's step at most 1/3 of the reference's):
tandem against a plain PyTorch-Python GRPO loop (bench/torch_grpo.py, run with Debian's
python3-torch: the same libtorch 1.13 and OpenBLAS) on the same model, prompts per step,
group size, prompt and response lengths, micro-batch and threads, for (a) the small preset
and (b) a Qwen3-shaped model with Qwen3's 151,936-token vocabulary (~9.5M parameters
besides the 39M of its tied embedding; Qwen3's tokenizer from build/test-assets/qwen3 when
scripts/fetch_tokenizer_assets.sh has fetched it). Both models are written by
`tandem init-model`; the Python loop loads the same model.safetensors. Their config.json
names no EOS token, so every response runs the full --new-tokens in both (checked from
tandem's metrics). tandem runs configs/quickstart.yaml (reward math_answer on
builtin:addition1 prompts) without the sft warm-up, colocated, 1 rollout and 1 learner
worker, 1 epoch of 1 mini-batch, kl 0, PPO-clip 0.2/0.28, AdamW lr 1e-3 clipped to 1.
Per model: one JSON line for each side (medians and min/max of rollout_s, train_s and
step_s over --steps steps after --warmup), then one with tandem/python for each median.

--mode workers: configs/quickstart.yaml with 1 and then 2 rollout workers, in each
placement: one JSON line per configuration (wall time, warm-up time, per-phase step times,
phase shares, response tokens/s, reward at the start and the end), then one JSON line with
the 2-worker figures over the 1-worker ones measured in the same run (the reference).

    python3 bench/e2e_cpu.py [--threads 2] [--steps 7] [--model DIR ...]
    python3 bench/e2e_cpu.py --mode workers [--steps 60]

Standard library only here; the reference loop needs /usr/bin/python3 with python3-torch.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ["rollout_s", "reward_s", "train_s", "sync_s", "step_s"]
# The first steps pay for process start-up and first-touch allocations (fresh shared-memory
# segments, allocator growth); they say nothing about the steady-state step.
WARMUP_STEPS_SKIPPED = 3
REWARD_WINDOW = 10
# Qwen3's architecture and real vocabulary with a body small enough for a 2-core CPU:
# 12 layers of Qwen3-0.6B's proportions at hidden 256 (~9.5M parameters) under a 151,936 x
# 256 tied embedding (38.9M), so the vocabulary's cost (sampling and the log-softmax over
# 151k logits per token) weighs as it does in the real models. No eos_token_id: see above.
QWEN3_SHAPE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 12,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
    "vocab_size": 151936, "max_position_embeddings": 1024, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": True, "hidden_act": "silu",
    "bos_token_id": 151643, "torch_dtype": "float32",
}
GOAL_RATIO = 1 / 3  # issue 15: tandem's step time at most a third of the PyTorch loop's


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--mode", choices=["torch", "workers"], default="torch",
                        help="torch: tandem against the PyTorch loop; workers: 2 rollout workers against 1")
    parser.add_argument("--tandem", default=os.path.join(REPO_ROOT, "build/controller/tandem"),
                        help="tandem binary (copied to a temp dir before use)")
    parser.add_argument("--config", default=os.path.join(REPO_ROOT, "configs/quickstart.yaml"))
    parser.add_argument("--steps", type=int,
                        help="torch: measured steps after --warmup (default 7); workers: RL steps per run (default 60)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch: intra-op threads of the Python loop and of tandem's rollout and learner workers")
    parser.add_argument("--warmup", type=int, default=WARMUP_STEPS_SKIPPED, help="torch: steps run before the measured ones")
    parser.add_argument("--model", action="append",
                        help="torch: a Hugging Face model directory to use instead of the two built ones (repeatable)")
    parser.add_argument("--prompts", type=int, default=16, help="torch: prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="torch: samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=16, help="torch: response tokens per sample")
    parser.add_argument("--micro-batch", type=int, default=32, help="torch: samples per forward/backward")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="torch: training compute dtype of both sides (learner.precision; PyTorch: CPU autocast)")
    parser.add_argument("--rollout-weights", choices=["fp32", "bf16"], default="fp32",
                        help="torch: tandem's rollout.cpu_weights (bf16: half the bytes per decoded token, "
                             "bf16 products on CPUs with AVX512_BF16); the Python loop samples in float32")
    parser.add_argument("--python", default="/usr/bin/python3", help="torch: interpreter with Debian's python3-torch")
    parser.add_argument("--qwen3-tokenizer", default=os.path.join(REPO_ROOT, "build/test-assets/qwen3"),
                        help="torch: directory with Qwen3's tokenizer.json (absent: byte-level)")
    parser.add_argument("--workers", default="1,2",
                        help="workers: rollout worker counts, comma separated; the first is the reference")
    parser.add_argument("--placements", default="colocated,disaggregated",
                        help="workers: placements, comma separated")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = 7 if args.mode == "torch" else 60
    if args.mode == "workers" and args.steps <= WARMUP_STEPS_SKIPPED:
        parser.error(f"--steps must exceed the {WARMUP_STEPS_SKIPPED} skipped warm-up steps")
    if args.mode == "torch" and (args.steps < 1 or args.warmup < 0 or args.threads < 1):
        parser.error("--steps and --threads must be at least 1, --warmup at least 0")
    return args


def copy_binary(tandem, into_dir):
    """Copy the binary so that a concurrent rebuild of build/ cannot swap it mid-run
    (the controller starts its workers from its own executable)."""
    copy = os.path.join(into_dir, "tandem")
    shutil.copy2(tandem, copy)
    return copy


def run_tandem(binary, config, settings, run_dir):
    """Run one training job to completion with `--set` SETTINGS; return its wall time in s."""
    command = [binary, "run", config, "--run-dir", run_dir,
               # Checkpoints are I/O outside the steps; keep them out of wall_s.
               "--set", "experiment.checkpoint_every=0", "--set", "logging.console=quiet"]
    for setting in settings:
        command += ["--set", setting]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"e2e_cpu: {' '.join(command)} exited with {done.returncode}")
    return wall_s


def read_jsonl(path):
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def read_sft_metrics(run_dir):
    # A config without an sft: section writes no sft_metrics.jsonl; its warm-up costs 0 s.
    path = os.path.join(run_dir, "sft_metrics.jsonl")
    return read_jsonl(path) if os.path.exists(path) else []


def response_tokens(row):
    # metrics.jsonl gives the count of responses and their mean length, not the total.
    return row["response/count"] * row["response/length_mean"]



# --mode workers

def summarize(placement, workers, steps, wall_s, rows, sft_rows):
    """One configuration's figures from its metrics.jsonl and sft_metrics.jsonl rows."""
    if len(rows) != steps:
        raise SystemExit(f"e2e_cpu: expected {steps} steps in metrics.jsonl, found {len(rows)}")
    measured = rows[WARMUP_STEPS_SKIPPED:]
    summary = {
        "bench": "e2e_cpu",
        "placement": placement,
        "rollout_workers": workers,
        "steps": steps,
        "steps_measured": len(measured),
        "wall_s": round(wall_s, 3),
        "warmup_s": round(sum(row["time/step_s"] for row in sft_rows), 3),
        "warmup_steps": len(sft_rows),
        # The 1-minute load average as the run ends: on a shared machine it tells whether
        # other work (a build) competed for the cores during this configuration.
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    for phase in PHASES:
        values = [row["time/" + phase] for row in measured]
        summary[f"median_{phase}"] = round(statistics.median(values), 5)
        summary[f"mean_{phase}"] = round(statistics.fmean(values), 5)
    # Shares and rates from totals over the measured steps, so a slow step weighs by its
    # length (the throughput a user waits through), not as one vote among many.
    step_total = sum(row["time/step_s"] for row in measured)
    for phase in PHASES[:-1]:
        summary[f"share_{phase[:-2]}"] = round(sum(row["time/" + phase] for row in measured) / step_total, 4)
    # What the four phases do not cover: advantages, batching, metrics, controller messaging
    # (from the unrounded totals: 1 minus the rounded shares showed rounding error as -0.0001).
    phases_total = sum(row["time/" + p] for row in measured for p in PHASES[:-1])
    summary["share_other"] = round((step_total - phases_total) / step_total, 4)
    tokens = sum(response_tokens(row) for row in measured)
    summary["tokens_per_s_step"] = round(tokens / step_total, 1)
    summary["tokens_per_s_rollout"] = round(tokens / sum(row["time/rollout_s"] for row in measured), 1)
    # Reward over all RL steps: learning progress, not speed, so no warm-up is skipped.
    summary["reward_first10"] = round(statistics.fmean(r["reward/mean"] for r in rows[:REWARD_WINDOW]), 4)
    summary["reward_last10"] = round(statistics.fmean(r["reward/mean"] for r in rows[-REWARD_WINDOW:]), 4)
    return summary


def ratios(summaries, reference_workers, workers):
    """Each placement's `workers` figures over its `reference_workers` figures."""
    by_key = {(s["placement"], s["rollout_workers"]): s for s in summaries}
    line = {"bench": "e2e_cpu", "ratio": f"{workers} rollout workers / {reference_workers}"}
    for placement in dict.fromkeys(s["placement"] for s in summaries):
        new, ref = by_key[(placement, workers)], by_key[(placement, reference_workers)]
        line[placement] = {
            key: round(new[key] / ref[key], 3)
            for key in ("median_step_s", "median_rollout_s", "tokens_per_s_step",
                        "tokens_per_s_rollout", "wall_s")
        }
    return line


def main_workers(args):
    workers_list = [int(w) for w in args.workers.split(",")]
    placements = args.placements.split(",")
    summaries = []
    with tempfile.TemporaryDirectory(prefix="tandem-e2e-") as tmp:
        binary = copy_binary(args.tandem, tmp)
        for placement in placements:
            for workers in workers_list:
                run_dir = os.path.join(tmp, f"{placement}-w{workers}")
                settings = [f"rollout.workers={workers}", f"placement={placement}", f"experiment.steps={args.steps}"]
                wall_s = run_tandem(binary, args.config, settings, run_dir)
                summary = summarize(placement, workers, args.steps, wall_s,
                                    read_jsonl(os.path.join(run_dir, "metrics.jsonl")),
                                    read_sft_metrics(run_dir))
                summaries.append(summary)
                print(json.dumps(summary), flush=True)
    for workers in workers_list[1:]:
        print(json.dumps(ratios(summaries, workers_list[0], workers)), flush=True)


# --mode torch

LR = 1e-3  # AdamW's learning rate on both sides (weight decay 0, gradient clipped to norm 1)
TORCH_PHASES = ["rollout_s", "train_s", "step_s"]  # the phases both sides time


def init_model(binary, flags):
    done = subprocess.run([binary, "init-model", *flags], capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"e2e_cpu: tandem init-model {' '.join(flags)} exited with {done.returncode}")


def built_models(binary, tmp, qwen3_tokenizer):
    """[(name, directory, tokenizer)] of the two models the issue names, written by
    tandem init-model into TMP."""
    small = os.path.join(tmp, "init-small")
    init_model(binary, ["--preset", "small", "--out", small])
    shape = os.path.join(tmp, "qwen3_shape.json")
    with open(shape, "w") as f:
        json.dump(QWEN3_SHAPE, f)
    qwen3 = os.path.join(tmp, "init-qwen3-151k")
    have_tokenizer = os.path.exists(os.path.join(qwen3_tokenizer, "tokenizer.json"))
    tokenizer_flags = ["--tokenizer", qwen3_tokenizer] if have_tokenizer else []
    init_model(binary, ["--config", shape, *tokenizer_flags, "--out", qwen3])
    return [("small", small, "byte-level"), ("qwen3-151k", qwen3, "qwen3" if have_tokenizer else "byte-level")]


def without_eos(source, into):
    """SOURCE with a config.json that names no EOS token, in INTO: tandem's config has no
    ignore_eos key, and a model without EOS ids never stops a response early, so both sides
    sample exactly --new-tokens per response. The other files are linked, not copied (a real
    model's weights are gigabytes); the Python loop reads the same weights."""
    os.makedirs(into)
    for name in os.listdir(source):
        if name != "config.json":
            os.symlink(os.path.abspath(os.path.join(source, name)), os.path.join(into, name))
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config.pop("eos_token_id", None)
    with open(os.path.join(into, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return config


def torch_mode_settings(args, model_dir, config):
    """tandem's side of the comparison, setting every knob that shapes the work of a step
    (quickstart.yaml's values included, so that an edit there cannot skew it)."""
    samples = args.prompts * args.group_size
    # Room for every sample's KV cache at once, as the Python loop preallocates it (prompts
    # up to 64 tokens, plus a 16-token block of slack per sample).
    bytes_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * 4 * config.get(
        "head_dim", config["hidden_size"] // config["num_attention_heads"])
    kv_cache_mb = max(64, -(-bytes_per_token * samples * (64 + args.new_tokens + 16) // 2**20))
    return [
        f"model.path={model_dir}", "sft.steps=0", f"experiment.steps={args.warmup + args.steps}",
        "experiment.eval_every=0", f"data.batch_size={args.prompts}",
        "algorithm.advantage=grpo", f"algorithm.group_size={args.group_size}", "algorithm.normalize_std=true",
        "algorithm.policy_loss=ppo_clip", "algorithm.loss_agg=token_mean", "algorithm.clip.low=0.2",
        "algorithm.clip.high=0.28", "algorithm.kl.coef=0", "algorithm.entropy_coef=0",
        "rollout.workers=1", "rollout.device=cpu", f"rollout.max_new_tokens={args.new_tokens}",
        "rollout.temperature=1", "rollout.top_p=1", "rollout.top_k=0", f"rollout.threads={args.threads}",
        f"rollout.kv_cache_mb={kv_cache_mb}", f"rollout.cpu_weights={args.rollout_weights}", f"rollout.max_running={max(256, samples)}",
        "learner.workers=1", "learner.device=cpu", f"learner.threads={args.threads}", "learner.epochs=1",
        "learner.mini_batches=1", f"learner.micro_batch_size={args.micro_batch}", f"learner.precision={args.precision}",
        "learner.optimizer.name=adamw", f"learner.optimizer.lr={LR}", "learner.optimizer.weight_decay=0",
        "learner.optimizer.grad_clip=1", "learner.optimizer.schedule=constant", "placement=colocated",
    ]


def spread(values, phase):
    return {f"median_{phase}": round(statistics.median(values), 5),
            f"min_{phase}": round(min(values), 5), f"max_{phase}": round(max(values), 5)}


def tandem_summary(args, name, rows, wall_s):
    """tandem's line for one model, after checking that its steps did the Python loop's work."""
    if len(rows) != args.warmup + args.steps:
        raise SystemExit(f"e2e_cpu: expected {args.warmup + args.steps} steps in metrics.jsonl, found {len(rows)}")
    samples = args.prompts * args.group_size
    for row in rows:
        if (row["response/count"], row["response/length_min"], row["response/length_max"]) != (
                samples, args.new_tokens, args.new_tokens):
            raise SystemExit(f"e2e_cpu: {name} step {row['step']}: {row['response/count']} responses of "
                             f"{row['response/length_min']}-{row['response/length_max']} tokens, not {samples} of "
                             f"{args.new_tokens}: the Python loop's work differs")
    prompt_len_mean = statistics.fmean(row["prompt/length_mean"] for row in rows)
    line = {"bench": "e2e_cpu", "mode": "torch", "model": name, "runner": "tandem", "threads": args.threads,
            "prompts": args.prompts, "group_size": args.group_size, "prompt_len_mean": round(prompt_len_mean, 3),
            "new_tokens": args.new_tokens, "micro_batch": args.micro_batch, "precision": args.precision,
            "rollout_weights": args.rollout_weights, "steps_measured": args.steps, "wall_s": round(wall_s, 3)}
    for phase in PHASES:
        line.update(spread([row["time/" + phase] for row in rows[args.warmup:]], phase))
    line["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return line


def openblas_core_like_tandem():
    """The OPENBLAS_CORETYPE tandem's workers give themselves when Debian's OpenBLAS
    0.3.21 does not know the CPU (core/math_environment.h), from /proc/cpuinfo's flags;
    None when the user set one or no wide vector unit is there. The Python loop gets the
    same kernels, so that the comparison is of the code, not of a BLAS misdetection."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return None
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def run_torch_loop(args, name, model_dir, prompt_len):
    """The Python loop's summary line for one model (bench/torch_grpo.py's last line)."""
    command = [args.python, os.path.join(REPO_ROOT, "bench/torch_grpo.py"), "--model", model_dir,
               "--threads", str(args.threads), "--prompts", str(args.prompts),
               "--group-size", str(args.group_size), "--prompt-len", str(prompt_len),
               "--new-tokens", str(args.new_tokens), "--micro-batch", str(args.micro_batch),
               "--lr", str(LR), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--precision", args.precision]
    env = dict(os.environ)
    core = openblas_core_like_tandem()
    if core:
        env["OPENBLAS_CORETYPE"] = core
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"e2e_cpu: {' '.join(command)} exited with {done.returncode}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["openblas_coretype"] = core or os.environ.get("OPENBLAS_CORETYPE", "detected")
    line = {"bench": "e2e_cpu", "mode": "torch", "model": name, "runner": "torch_grpo"}
    line.update({k: v for k, v in summary.items() if k not in ("bench", "summary", "model")})
    line["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return line


def check_torch(python):
    done = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"e2e_cpu: {python} cannot import torch (apt-get install python3-torch; "
                         f"--python names another interpreter)\n{done.stderr}")


def main_torch(args):
    check_torch(args.python)
    with tempfile.TemporaryDirectory(prefix="tandem-e2e-") as tmp:
        binary = copy_binary(args.tandem, tmp)
        if args.model:
            models = [(os.path.basename(os.path.normpath(d)), d, "the model's") for d in args.model]
        else:
            models = built_models(binary, tmp, args.qwen3_tokenizer)
        for index, (name, source, tokenizer) in enumerate(models):
            model_dir = os.path.join(tmp, f"model-{index}")
            config = without_eos(source, model_dir)
            run_dir = os.path.join(tmp, f"run-{index}")
            wall_s = run_tandem(binary, args.config, torch_mode_settings(args, model_dir, config), run_dir)
            ours = tandem_summary(args, name, read_jsonl(os.path.join(run_dir, "metrics.jsonl")), wall_s)
            ours["tokenizer"] = tokenizer
            print(json.dumps(ours), flush=True)
            # The loop's prompts are random ids of tandem's prompt length (the quickstart's
            # prompts all have the same length; with a mix, the mean, rounded).
            theirs = run_torch_loop(args, name, model_dir, max(1, round(ours["prompt_len_mean"])))
            print(json.dumps(theirs), flush=True)
            ratio = {"bench": "e2e_cpu", "mode": "torch", "model": name, "ratio": "tandem / torch_grpo",
                     "precision": args.precision, "rollout_weights": args.rollout_weights}
            for phase in TORCH_PHASES:
                ratio[f"median_{phase}"] = round(ours[f"median_{phase}"] / theirs[f"median_{phase}"], 3)
            ratio["goal_step_ratio_at_most"] = round(GOAL_RATIO, 3)
            ratio["meets_goal"] = ratio["median_step_s"] <= GOAL_RATIO
            print(json.dumps(ratio), flush=True)


def main():
    args = parse_args()
    if args.mode == "torch":
        main_torch(args)
    else:
        main_workers(args)


if __name__ == "__main__":
    main()
