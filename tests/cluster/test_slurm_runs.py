#!/usr/bin/env python3
"""tandem on a real Slurm cluster (slurmctld + three slurmd virtual nodes on this host,
tests/cluster/slurm_cluster.py): `tandem submit` jobs with launcher.kind: slurm.

  1. a run over 3 nodes end to end (CURVE on the control plane), with one worker's job
     step killed midway: the controller restarts it and the run finishes;
  2. `scancel --batch --signal=TERM`: the controller checkpoints after its step and stops;
  3. `scontrol requeue`: the requeued job resumes from its newest whole checkpoint;
  4. `tandem submit --dry-run` prints the sbatch script.

Usage: test_slurm_runs.py TANDEM_BINARY. Exits 77 with the reason where Slurm cannot run
(not root, slurm-wlm/munge not installed, the cluster did not come up).
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import Failure, check, wait_for  # noqa: E402
from slurm_cluster import SlurmCluster, SlurmClusterError, _static_unavailable_reason  # noqa: E402

SKIP = 77
# Runs long enough that a kill or a requeue lands mid-run (a step takes 0.03 to 0.5 s).
STEPS = 200
CONFIG = """
experiment: {{name: {name}, seed: 1, steps: {steps}, checkpoint_every: 10, keep_checkpoints: 2}}
model:      {{path: "builtin:tiny", dtype: float32}}
data:       {{train: "builtin:addition1", prompt_key: prompt, batch_size: 8}}
algorithm:  {{advantage: grpo, group_size: 4}}
rollout:    {{workers: 2, device: cpu, max_new_tokens: 4, threads: 1, kv_cache_mb: 8}}
learner:    {{workers: 2, device: cpu, sharding: ddp, micro_batch_size: 16, threads: 1}}
reward:     [{{name: math_answer, weight: 1.0}}]
placement:  disaggregated
launcher:
  kind: slurm
  auth: curve
  heartbeat_timeout_s: 5
  register_timeout_s: 60
  slurm: {{nodes: 3, time: "10:00"}}
logging:    {{console: plain}}
"""


class Runs:
    def __init__(self, tandem: str, cluster: SlurmCluster, work: Path):
        self.tandem = tandem
        self.cluster = cluster
        self.work = work

    def config(self, name: str, steps: int) -> Path:
        path = self.work / f"{name}.yaml"
        path.write_text(CONFIG.format(name=name, steps=steps))
        return path

    def submit(self, name: str, steps: int) -> tuple[str, Path]:
        run_dir = self.work / "runs" / name
        out = subprocess.run([self.tandem, "submit", str(self.config(name, steps)), "--run-dir", str(run_dir)],
                             env=self.cluster.env, capture_output=True, text=True, timeout=60)
        check(out.returncode == 0, f"tandem submit failed ({out.returncode}): {out.stderr}")
        job = out.stdout.strip()
        check(job.isdigit(), f"tandem submit printed {out.stdout!r}, not a job id")
        check(f"submitted Slurm job {job}" in out.stderr, f"submit's message: {out.stderr}")
        return job, run_dir

    def job_field(self, job: str, field: str) -> str:
        out = self.cluster.run(["scontrol", "show", "job", job, "-o"], timeout=20, check=False)
        match = re.search(rf"\b{field}=(\S+)", out.stdout)
        return match.group(1) if match else ""

    def wait_job_done(self, job: str, timeout: float) -> str:
        done = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
        return wait_for(f"job {job} to end", lambda: (s := self.job_field(job, "JobState")) in done and s, timeout, 0.5)

    @staticmethod
    def steps_done(run_dir: Path) -> int:
        metrics = run_dir / "metrics.jsonl"
        if not metrics.exists():
            return 0
        return sum(1 for line in metrics.read_text().splitlines() if line.strip())

    def step_of_worker(self, job: str, worker: str) -> str:
        out = self.cluster.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], timeout=20)
        for line in out.stdout.splitlines():
            step, name = line.split()
            if name == worker:
                return step
        return ""

    def explain(self, run_dir: Path, job: str) -> str:
        parts = [f"--- slurm-{job}.out ---", (run_dir / f"slurm-{job}.out").read_text()[-3000:]
                 if (run_dir / f"slurm-{job}.out").exists() else "(none)"]
        log = run_dir / "logs" / "controller-0.log"
        if log.exists():
            parts += ["--- controller-0.log ---", log.read_text()[-4000:]]
        return "\n".join(parts)


def run_end_to_end_with_a_killed_step(runs: Runs) -> None:
    # Steps take 0.03 s on a fast machine: enough of them that the kill lands mid-run.
    job, run_dir = runs.submit("three-nodes", steps=STEPS)
    try:
        wait_for("step 2 of the run", lambda: runs.steps_done(run_dir) >= 2, 120)
        step = runs.step_of_worker(job, "rollout-1")
        check(step != "", "no job step named rollout-1")
        runs.cluster.run(["scancel", step], timeout=20, check=False)  # scancel's exit code lies for steps
        state = runs.wait_job_done(job, 300)
        check(state == "COMPLETED", f"job ended {state}")
        check(runs.job_field(job, "ExitCode") == "0:0", f"job exit code {runs.job_field(job, 'ExitCode')}")
        check((run_dir / "finished.json").exists(), "no finished.json")
        check(runs.steps_done(run_dir) == STEPS, f"{runs.steps_done(run_dir)} metric rows, want {STEPS}")
        log = (run_dir / "logs" / "controller-0.log").read_text()
        nodes = set(re.findall(r"as a job step of Slurm job \d+ on (n\d)", log))
        check(nodes == {"n1", "n2", "n3"}, f"worker steps ran on {sorted(nodes)}, want n1..n3")
        check("CURVE" in log, "the control plane was not CURVE-authenticated")
        check(re.search(r"rollout-1 .*restarting it", log) is not None, "the killed step's worker was not restarted")
        check(len(list((run_dir / "keys").glob("*.key"))) == 5, "keys: want the controller's and 4 workers'")
        print(f"ok: 3-node run, job {job}, rollout-1's step {step} killed and restarted")
    except Failure as e:
        raise Failure(f"{e}\n{runs.explain(run_dir, job)}") from None


def scancel_checkpoints_and_stops(runs: Runs) -> None:
    job, run_dir = runs.submit("scancelled", steps=400)
    try:
        wait_for("step 3 of the run", lambda: runs.steps_done(run_dir) >= 3, 120)
        runs.cluster.run(["scancel", "--batch", "--signal=TERM", job], timeout=20)
        runs.wait_job_done(job, 120)
        out = (run_dir / f"slurm-{job}.out").read_text()
        match = re.search(r"stopped after step (\d+) on SIGTERM, with a checkpoint", out)
        check(match is not None, "the controller did not report an orderly stop")
        stopped = int(match.group(1))
        check(stopped >= 3 and stopped < 400, f"stopped after step {stopped}")
        check((run_dir / "checkpoints" / f"step_{stopped}").is_dir(), f"no checkpoint of step {stopped}")
        check(not (run_dir / "finished.json").exists(), "a stopped run is marked finished")
        print(f"ok: scancel --batch --signal=TERM of job {job}: checkpoint at step {stopped}, stopped")
    except Failure as e:
        raise Failure(f"{e}\n{runs.explain(run_dir, job)}") from None


def requeue_resumes(runs: Runs) -> None:
    job, run_dir = runs.submit("requeued", steps=STEPS)
    try:
        wait_for("the checkpoint of step 10", lambda: (run_dir / "checkpoints" / "step_10").is_dir()
                 and runs.steps_done(run_dir) >= 11, 120)
        runs.cluster.run(["scontrol", "requeue", job], timeout=20)
        # A requeued job waits (BeginTime) before it may start again: start it now.
        wait_for("the job to be pending again", lambda: runs.job_field(job, "JobState") == "PENDING", 60, 0.5)
        runs.cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=20)
        state = runs.wait_job_done(job, 300)
        check(state == "COMPLETED", f"requeued job ended {state}")
        check(runs.job_field(job, "Restarts") == "1", f"Restarts={runs.job_field(job, 'Restarts')}")
        out = (run_dir / f"slurm-{job}.out").read_text()
        check(re.search(r"tandem: resuming after step \d+", out) is not None, "the requeued job did not resume")
        check((run_dir / "finished.json").exists(), "the resumed run did not finish")
        finished = json.loads((run_dir / "finished.json").read_text())
        check(finished.get("steps") == STEPS, f"finished.json: {finished}")
        print(f"ok: job {job} requeued and resumed from its checkpoint to step {STEPS}")
    except Failure as e:
        raise Failure(f"{e}\n{runs.explain(run_dir, job)}") from None


def dry_run_prints_the_script(tandem: str, work: Path) -> None:
    config = work / "dry.yaml"
    config.write_text(CONFIG.format(name="dry", steps=3).replace("time: \"10:00\"", "time: \"04:00:00\", "
                                                                 "partition: gpu, account: lab, gpus_per_node: 0, "
                                                                 "extra_args: \"--qos=high --exclusive\""))
    out = subprocess.run([tandem, "submit", str(config), "--run-dir", str(work / "dry-run"), "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"submit --dry-run failed: {out.stderr}")
    script = out.stdout
    for line in ["#!/bin/bash", "#SBATCH --nodes=3", "#SBATCH --partition=gpu", "#SBATCH --account=lab",
                 "#SBATCH --time=04:00:00", "#SBATCH --requeue", "#SBATCH --qos=high", "#SBATCH --exclusive",
                 "#SBATCH --signal=B:TERM@120", f"#SBATCH --output={work / 'dry-run'}/slurm-%j.out"]:
        check(line in script.splitlines(), f"--dry-run script lacks {line!r}:\n{script}")
    check(re.search(r'exec "\$tandem" resume "\$run_dir"', script) is not None, "no resume branch")
    check(re.search(r'exec "\$tandem" run "\$config" --run-dir "\$run_dir"', script) is not None, "no run line")
    check("kind: slurm" in script, "the resolved config is not in the script")
    check(not (work / "dry-run").exists(), "--dry-run created the run directory")
    bash = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=20)
    check(bash.returncode == 0, f"the script is not valid bash: {bash.stderr}")
    # A config of another launcher kind is refused, naming the key.
    local = work / "local.yaml"
    local.write_text(CONFIG.format(name="local", steps=3).replace("kind: slurm", "kind: local"))
    out = subprocess.run([tandem, "submit", str(local), "--dry-run"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 2 and "launcher.kind: slurm" in out.stderr, f"kind local: {out.returncode} {out.stderr}")
    print("ok: tandem submit --dry-run")


def main() -> int:
    tandem = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tandem-slurm-") as tmp:
        work = Path(tmp)
        try:
            dry_run_prints_the_script(tandem, work)
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
        reason = _static_unavailable_reason()
        if reason:
            print(f"SKIP: {reason}")
            return SKIP
        cluster = SlurmCluster(work / "cluster", nodes=3, cpus_per_node=4)
        try:
            with cluster:
                print(f"cluster up in {cluster.ready_seconds:.2f} s")
                runs = Runs(tandem, cluster, work)
                run_end_to_end_with_a_killed_step(runs)
                scancel_checkpoints_and_stops(runs)
                requeue_resumes(runs)
        except SlurmClusterError as e:
            if cluster.ready_seconds is None:
                print(f"SKIP: the Slurm cluster did not come up: {e}")
                return SKIP
            print(f"FAIL: {e}")
            return 1
        except Failure as e:
            print(f"FAIL: {e}\n{cluster.log_tails()}")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
