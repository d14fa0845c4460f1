#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/test_slurm.py and for trying the slurm profile
# by hand: munged, slurmctld and slurmd as root, no accounting database, and a count-only GRES
# `neuron:2` (two "Neuron chips" that Slurm hands out to capture jobs; nothing is behind them).
#
#   tests/slurm/cluster.sh install        # Debian packages: slurmctld slurmd slurm-client munge (root)
#   eval "$(tests/slurm/cluster.sh start DIR)"   # start; prints the export of SLURM_CONF
#   tests/slurm/cluster.sh stop DIR       # stop the daemons by their PID files
#
# DIR holds slurm.conf, gres.conf, the state, the logs and the PID files. Slurm's clients find the
# cluster through SLURM_CONF=DIR/slurm.conf, and through /etc/slurm/slurm.conf, a link to it made by
# start (removed by stop): Snakemake's slurm-jobstep executor drops SLURM_* variables before its srun
# inside each job, so srun there reads the default path. A /etc/slurm/slurm.conf of your own is
# never replaced: start refuses.
set -euo pipefail

cmd=${1:?usage: cluster.sh install|start DIR|stop DIR}

if [[ $cmd == install ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
    exit 0
fi

dir=$(realpath -m "${2:?cluster.sh $cmd DIR}")

if [[ $cmd == stop ]]; then
    for daemon in slurmd slurmctld munged; do
        if [[ -f $dir/$daemon.pid ]]; then
            kill "$(cat "$dir/$daemon.pid")" 2>/dev/null || true
        fi
    done
    for daemon in slurmd slurmctld munged; do  # wait, so a next start finds the ports free
        pid=$(cat "$dir/$daemon.pid" 2>/dev/null || true)
        for _ in $(seq 50); do [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && sleep 0.1 || break; done
        rm -f "$dir/$daemon.pid"
    done
    if [[ $(readlink /etc/slurm/slurm.conf 2>/dev/null) == "$dir/slurm.conf" ]]; then
        rm -f /etc/slurm/slurm.conf
    fi
    exit 0
fi

[[ $cmd == start ]] || { echo "cluster.sh: unknown command $cmd" >&2; exit 2; }
for tool in munged slurmctld slurmd sbatch squeue; do
    command -v "$tool" >/dev/null || { echo "cluster.sh: $tool not found; run: $0 install" >&2; exit 3; }
done
if [[ -e /etc/slurm/slurm.conf && $(readlink /etc/slurm/slurm.conf) != "$dir/slurm.conf" ]]; then
    echo "cluster.sh: /etc/slurm/slurm.conf exists and is not this test cluster's; stop that Slurm (or the" \
         "test cluster it links to: cluster.sh stop DIR) first" >&2
    exit 4
fi
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" /etc/slurm
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# munge: a key of our own, the daemon's socket in DIR (no system service needed)
if [[ ! -f $dir/munge/munge.key ]]; then
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
fi
socket=$dir/munge/munge.socket
munged --force --key-file "$dir/munge/munge.key" --socket "$socket" --pid-file "$dir/munged.pid" \
    --log-file "$dir/munged.log" --seed-file "$dir/munge/munge.seed"

cat > "$dir/slurm.conf" <<EOF
ClusterName=neuronsweep-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6917}
SlurmdPort=${SLURMD_PORT:-6918}
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=600
GresTypes=neuron
NodeName=$host CPUs=$cpus RealMemory=$mem_mb Gres=neuron:2 State=UNKNOWN
PartitionName=neuron Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
cat > "$dir/gres.conf" <<EOF
NodeName=$host Name=neuron Count=2
EOF

ln -sfn "$dir/slurm.conf" /etc/slurm/slurm.conf
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.2
done
echo "cluster.sh: the node did not become idle; see $dir/slurmctld.log and $dir/slurmd.log" >&2
sinfo >&2 || true
exit 1
