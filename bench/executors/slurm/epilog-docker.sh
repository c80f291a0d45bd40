#!/bin/bash
# Slurm Epilog for cells run in docker containers (container runtime `docker`, docs/slurm.md): slurmd runs it on each
# node as a job ends (slurm.conf: Epilog=/path/to/epilog-docker.sh). A container started with --cgroup-parent under
# the job's cgroup is already limited by the job's --mem and killed with it; this removes whatever is left of the
# containers labelled with the job id (stopped or, after a failed kill, still running).
ids=$(docker ps -aq --filter "label=dpo-bench.slurm-job=${SLURM_JOB_ID:?}" 2>/dev/null)
[ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
exit 0
