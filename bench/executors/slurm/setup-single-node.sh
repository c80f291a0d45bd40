#!/usr/bin/env bash
# A real Slurm cluster on this one machine (Debian bookworm, Slurm 22.05), for `--executor slurm` and
# tests/integration/test_slurm.py: one slurmctld and SLURM_NODES (default 2) slurmd daemons, each its own node
# (`slurmd -N <node>`, one port each) on the same host, so multi-node jobs run for real. Idempotent: a cluster that
# already answers with this checkout's epilog is left as it is; one started from another checkout is given this
# one's configuration (`scontrol reconfigure`), as its epilog path may no longer exist and would drain every node.
#   bash bench/executors/slurm/setup-single-node.sh          # install (as root, from Debian) when missing, configure, start
#   bash bench/executors/slurm/setup-single-node.sh --stop   # stop the daemons this script started
# No systemd: munged, slurmctld and slurmd are started directly (munged as the munge user, the others as root).
# Plugins: proctrack/cgroup + task/cgroup (cgroup v1), so scancel kills whole process trees and --mem is enforced;
# no slurmdbd: finished jobs are read from the jobcomp/filetxt file (JOBCOMP below).
set -euo pipefail

CONF_DIR=/etc/slurm
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
JOBCOMP=$LOGS/jobcomp.txt
PARTITION=${SLURM_PARTITION:-debug}
NODES=${SLURM_NODES:-2}
EPILOG=$(cd "$(dirname "$0")" && pwd)/epilog-docker.sh

if [ "${1:-}" = "--stop" ]; then
  for pidfile in /run/slurmd-*.pid /run/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  exit 0
fi

answers() {  # the controller is up and every node takes jobs
  local states
  scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  states=$(sinfo -h -N -o '%T' 2>/dev/null) && [ -n "$states" ] || return 1
  ! echo "$states" | grep -qvE '^(idle|mixed|allocated|completing)$'
}

running_epilog() {  # the epilog the running controller uses
  scontrol show config 2>/dev/null | sed -n 's/^Epilog *= *//p'
}

if command -v sinfo >/dev/null 2>&1 && answers && [ "$(running_epilog)" = "$EPILOG" ]; then
  echo "slurm: cluster up ($(sinfo -h -o '%P %D node(s) %T' | head -1))"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "error: the Slurm tests need a local cluster: run 'bash bench/executors/slurm/setup-single-node.sh' as root" >&2
  exit 1
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1; then
  echo "slurm: installing slurmctld slurmd slurm-client munge (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; }
fi

host=$(hostname -s)
cpus=$(nproc)
# The machine's memory shared out between the nodes (each node's --mem limits are then real), a little below what
# the host reports, or slurmd registers the node as invalid. Every node gets every CPU: they share the cores.
memory=$(( ($(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') - 256) / NODES ))
names=$(seq -f "$host-n%g" 1 "$NODES")
node_lines=$(i=0; for name in $names; do
  echo "NodeName=$name NodeHostname=$host Port=$((6818 + i)) CPUs=$cpus RealMemory=$memory State=UNKNOWN"; i=$((i + 1))
done)

mkdir -p "$CONF_DIR" "$STATE" "$LOGS"
cat >"$CONF_DIR/slurm.conf" <<CONF
# written by dpo-bench bench/executors/slurm/setup-single-node.sh
ClusterName=dpobench
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmUser=root
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
JobAcctGatherType=jobacct_gather/cgroup
ReturnToService=2
KillWait=5
MinJobAge=60
InactiveLimit=0
MpiDefault=none
# removes the containers of a job that ran its cells in docker (docs/slurm.md): dockerd's containers outlive scancel
Epilog=$EPILOG
$node_lines
PartitionName=$PARTITION Nodes=$(echo $names | tr ' ' ,) Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
cat >"$CONF_DIR/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
CONF
touch "$JOBCOMP"

# munge: key, run dir, daemon as the munge user
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
pgrep -u munge -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged

if pgrep -x slurmctld >/dev/null; then
  scontrol reconfigure >/dev/null 2>&1 || true  # a controller started from another checkout: take this slurm.conf
else
  slurmctld
fi
for name in $names; do
  mkdir -p "$SPOOL-$name"
  pgrep -f "^slurmd -N $name\$" >/dev/null || slurmd -N "$name"
done

for i in $(seq 100); do
  if answers; then
    echo "slurm: cluster up ($(sinfo -h -o '%P %D node(s) %T' | head -1); jobcomp $JOBCOMP)"
    exit 0
  fi
  if [ $((i % 10)) = 0 ]; then  # a daemon that lost a race with its predecessor's shutdown: start it again
    pgrep -x slurmctld >/dev/null || slurmctld
    down=$(sinfo -h -N -t down,drain -o '%N' 2>/dev/null | sort -u | tr '\n' , | sed 's/,$//')
    [ -z "$down" ] || scontrol update nodename="$down" state=resume >/dev/null 2>&1 || true
  fi
  sleep 0.2
done
echo "error: slurm did not come up; see $LOGS/slurmctld.log and $LOGS/slurmd-*.log" >&2
exit 1
