#!/usr/bin/env python3
"""Self test of the Slurm test cluster: a 3-node sbatch job whose steps each
print SLURMD_NODENAME must run on all three virtual nodes, and a heterogeneous job's
two components must get separate nodes. Exits 77 with the
reason when the cluster cannot run here (not root, no Slurm, did not come up)."""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_cluster import SlurmCluster, SlurmClusterError, _static_unavailable_reason  # noqa: E402

SKIP = 77

# A heterogeneous job: component 0 on one node, component 1 on two; never one node for both.
HET_SCRIPT = """#!/bin/bash
#SBATCH --nodes=1 --ntasks-per-node=1 --time=1
#SBATCH hetjob
#SBATCH --nodes=2 --ntasks-per-node=1
echo "group0=$SLURM_JOB_NODELIST_HET_GROUP_0 group1=$SLURM_JOB_NODELIST_HET_GROUP_1"
srun --het-group=1 --nodes=2 --ntasks=2 bash -c 'echo "het1 node=$SLURMD_NODENAME"'
"""

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --nodes=3 --ntasks-per-node=1 --time=1
srun --nodes=3 --ntasks=3 bash -c 'echo "node=$SLURMD_NODENAME step=$SLURM_STEP_ID proc=$SLURM_PROCID"'
"""


def main() -> int:
    reason = _static_unavailable_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="slurm-selftest-") as tmp:
        workdir = Path(tmp)
        script = workdir / "job.sh"
        script.write_text(BATCH_SCRIPT)
        out = workdir / "job.out"
        cluster = SlurmCluster(workdir / "cluster", nodes=3, cpus_per_node=2)
        try:
            with cluster:
                print(f"cluster up in {cluster.ready_seconds:.2f}s")
                cluster.run(["sbatch", "--wait", f"--output={out}", str(script)], timeout=40)
                text = out.read_text()
                print(text, end="")
                nodes = {line.split()[0] for line in text.splitlines() if line.startswith("node=")}
                want = {f"node={n}" for n in cluster.node_names}
                if nodes != want:
                    print(f"FAIL: steps ran on {sorted(nodes)}, want {sorted(want)}\n{cluster.log_tails()}")
                    return 1
                het_script = workdir / "het.sh"
                het_script.write_text(HET_SCRIPT)
                het_out = workdir / "het.out"
                cluster.run(["sbatch", "--wait", f"--output={het_out}", str(het_script)], timeout=40)
                het = het_out.read_text()
                print(het, end="")
                het_nodes = {line.split("=")[1] for line in het.splitlines() if line.startswith("het1 node=")}
                groups = [line for line in het.splitlines() if line.startswith("group0=")]
                if len(het_nodes) != 2 or not groups or groups[0].split()[0].split("=")[1] in het_nodes:
                    print(f"FAIL: the heterogeneous job's components did not get separate nodes\n{cluster.log_tails()}")
                    return 1
        except SlurmClusterError as e:
            if cluster.ready_seconds is None:  # never came up: an environment problem, not a failure
                print(f"SKIP: Slurm cluster did not come up: {e}")
                return SKIP
            print(f"FAIL: {e}")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
