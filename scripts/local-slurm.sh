#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (slurmctld, slurmd and munged on localhost), to try
# `s2s experiment run FILE --slurm` and `s2s course run --slurm` without a cluster, and for the
# tests that submit through Slurm. Needs root and Debian's packages:
#   apt-get install -y slurm-wlm munge
#   sudo scripts/local-slurm.sh          # start (idempotent: a running cluster is left alone)
#   sudo scripts/local-slurm.sh stop     # stop the three daemons
# The node gets every CPU of the machine (`nproc`) and a partition `debug`. Memory is not a
# scheduled resource here (SelectTypeParameters=CR_CPU): tasks are packed by CPUs alone.
# No accounting database: `sacct` answers nothing, and `s2s experiment status` reads a task's
# end from its run directory instead. An existing /etc/slurm/slurm.conf not written by this
# script is left alone (the script then only starts the daemons).
set -euo pipefail

conf=/etc/slurm/slurm.conf
mark="# written by s2s scripts/local-slurm.sh"
node=$(hostname -s)

stop() {
  for d in slurmd slurmctld munged; do
    for pidfile in "/run/$d.pid" "/run/munge/$d.pid"; do
      pid=$(cat "$pidfile" 2>/dev/null || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" && echo "stopped $d (PID $pid)"
      fi
    done
  done
}

if [ "${1:-start}" = stop ]; then stop; exit 0; fi
if [ "${1:-start}" != start ]; then echo "usage: $0 [start|stop]" >&2; exit 2; fi

for bin in munged slurmctld slurmd sinfo; do
  command -v "$bin" >/dev/null || { echo "error: $bin not found: apt-get install -y slurm-wlm munge" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "error: run as root (the daemons need it): sudo $0" >&2; exit 1; }

# A running cluster that answers is left as it is.
if sinfo -h -o %T 2>/dev/null | grep -q -E '^(idle|mixed|allocated)'; then
  echo "slurm is running: $(sinfo -h -o '%P %D node(s) %C CPUs (allocated/idle/other/total) %T' | head -1)"
  exit 0
fi

if [ ! -e "$conf" ] || grep -qF "$mark" "$conf"; then
  mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
  mkdir -p /etc/slurm
  cat >"$conf" <<EOF
$mark
ClusterName=s2s-local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# scancel: SIGTERM first (s2s checkpoints and stops), SIGKILL after KillWait seconds.
KillWait=30
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  echo "wrote $conf (node $node: $(nproc) CPUs, ${mem} MB)"
fi
mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/munge /var/log/munge /var/lib/munge
stop >/dev/null 2>&1 || true

# munge: a key if the package made none, then the daemon, as the package's user `munge`
# where there is one (else as root, which munged takes only with --force).
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  : # already running (Debian's package starts it where there is an init system)
elif id munge >/dev/null 2>&1; then
  chown -R munge: /etc/munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- munged
else
  munged --force
fi
slurmctld
slurmd

for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -q -E '^(idle|mixed|allocated)'; then
    echo "slurm is running: $(sinfo -h -o '%P %D node(s) %C CPUs (allocated/idle/other/total) %T' | head -1)"
    exit 0
  fi
  # A node left down by an earlier stop comes back.
  scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "error: slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
