#!/usr/bin/env bash
#SBATCH --ntasks-per-node=1
# Runs one command on every node of a SLURM GPU allocation, one process per node.
#
#   launch/slurm_gpu.sh --nodes 2 --gpus-per-node 8 --partition gpu --time 4:00:00 \
#       -- python -m launch.train --config=configs/base.py:qwen2.5-0.5b,grpo --workdir=/shared/run
#
# Outside an allocation (no SLURM_JOB_ID) it submits itself with
#   sbatch --nodes=N --ntasks-per-node=1 --gpus-per-node=G [--partition=P] [--time=T]
#          --output=LOGS/%x-%j.log launch/slurm_gpu.sh --logs LOGS -- COMMAND...
# and exits with sbatch's status (set SBATCH_WAIT=1 to wait for the job and exit
# with its status). Inside an allocation (the submitted job, an `salloc`, or
# `sbatch [flags] launch/slurm_gpu.sh -- COMMAND...`) it runs
#   srun --ntasks-per-node=1 --kill-on-bad-exit=1 --output=LOGS/%x-%j-%t.log COMMAND...
# i.e. the command once on every node of the allocation (which decides the nodes
# and GPUs there: --nodes/--gpus-per-node/--partition/--time apply only to the
# submission), each node's output in its own file (%t: the node's rank), and
# exits with srun's status (the highest of the nodes'). The step asks for no
# GPUs of its own, so each node's one process gets all the job's GPUs there
# (srun's default), and uses them all: launch/distributed.py passes them to
# jax.distributed.initialize as local_device_ids (JAX alone would give each
# process only GPU SLURM_LOCALID, i.e. GPU 0), which reads the rest from the
# SLURM_* variables srun sets (coordinator, process count and index), so no
# addresses are passed.
# Submit from the repository root with its environment active (the job inherits
# the current directory and environment), and use a --workdir on a file system
# every node shares. sbatch's own variables (SBATCH_ACCOUNT, SBATCH_QOS,
# SBATCH_CONSTRAINT, SBATCH_JOB_NAME, ...) add the cluster's other settings.
#
# Options:
#   --nodes N            nodes (default 1)
#   --gpus-per-node G    GPUs per node (default 8)
#   --partition P        partition (default: the cluster's)
#   --time T             time limit, e.g. 4:00:00 (default: the partition's)
#   --logs DIR           directory of the log files (default logs/slurm_gpu)
#   --dry-run            print the sbatch (or, inside an allocation, srun) command
#                        instead of running it
#   -h, --help           print this help
# A bad or missing argument fails before anything runs, with one `error: ...`
# line on stderr and exit status 2.
set -euo pipefail

usage() {  # the header comment above, without the leading '# ' and #SBATCH lines
  awk 'NR == 1 || /^#SBATCH/ { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' \
    "${BASH_SOURCE[0]}"
}

die() {
  echo "error: $* (see launch/slurm_gpu.sh --help)" >&2
  exit 2
}

# One word for a shell: as is when it is safe, else in single quotes. (Each launcher is
# self-contained: sbatch runs a copy of this file from its spool directory, where a
# shared helper file next to it would not be found.)
quote() {
  case $1 in
    '') printf "''" ;;
    *[!A-Za-z0-9_./=:,@%+-]*)
      local rest=$1 out=""
      while [[ $rest == *"'"* ]]; do
        out+="${rest%%"'"*}'\\''"
        rest=${rest#*"'"}
      done
      printf "'%s'" "$out$rest" ;;
    *) printf '%s' "$1" ;;
  esac
}

quote_all() {  # a command line, quoted for a shell (the form --dry-run prints)
  local sep="" word
  for word in "$@"; do
    printf '%s' "$sep"
    quote "$word"
    sep=" "
  done
  echo
}

value() {  # the value of option $1 (given as $2, the rest of the command line)
  [[ $# -ge 2 && -n $2 && $2 != --* ]] || die "$1 needs a value"
}

nodes=1
gpus=8
partition=""
time_limit=""
logs=logs/slurm_gpu
dry_run=0
saw_separator=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --nodes) value "$@"; nodes=$2; shift 2 ;;
    --nodes=*) nodes=${1#*=}; shift ;;
    --gpus-per-node) value "$@"; gpus=$2; shift 2 ;;
    --gpus-per-node=*) gpus=${1#*=}; shift ;;
    --partition) value "$@"; partition=$2; shift 2 ;;
    --partition=*) partition=${1#*=}; shift ;;
    --time) value "$@"; time_limit=$2; shift 2 ;;
    --time=*) time_limit=${1#*=}; shift ;;
    --logs) value "$@"; logs=$2; shift 2 ;;
    --logs=*) logs=${1#*=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) saw_separator=1; shift; break ;;
    -*) die "unknown option: $1" ;;
    *) die "expected options, then -- and the command; got: $1" ;;
  esac
done

[[ $saw_separator == 1 ]] || die "no command: put it after --"
[[ $# -gt 0 && -n $1 ]] || die "no command after --"
[[ $nodes =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer, not: $nodes"
[[ $gpus =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node must be a positive integer, not: $gpus"
[[ -n $logs ]] || die "--logs is empty"

if [[ -z ${SLURM_JOB_ID:-} ]]; then
  # Not in an allocation: submit this script, which then runs the branch below.
  submit=(sbatch --nodes="$nodes" --ntasks-per-node=1 --gpus-per-node="$gpus")
  [[ -z $partition ]] || submit+=(--partition="$partition")
  [[ -z $time_limit ]] || submit+=(--time="$time_limit")
  submit+=(--output="$logs/%x-%j.log" "${BASH_SOURCE[0]}" --logs "$logs" -- "$@")
  if [[ $dry_run == 1 ]]; then
    quote_all "${submit[@]}"
    exit 0
  fi
  command -v sbatch >/dev/null || die "sbatch not found on PATH (not a SLURM login node?)"
  mkdir -p "$logs"  # SLURM does not create the directory of --output
  exec "${submit[@]}"
fi

run=(srun --ntasks-per-node=1 --kill-on-bad-exit=1 --output="$logs/%x-%j-%t.log" "$@")
if [[ $dry_run == 1 ]]; then
  quote_all "${run[@]}"
  exit 0
fi
mkdir -p "$logs"
echo "slurm_gpu: job $SLURM_JOB_ID: $(quote_all "${run[@]}")" >&2
exec "${run[@]}"
