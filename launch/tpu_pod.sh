#!/usr/bin/env bash
# Runs one command on every worker of a Cloud TPU VM pod and collects the logs.
#
#   launch/tpu_pod.sh --tpu NAME --zone ZONE [options] -- python -m launch.train \
#       --config=configs/base.py:qwen2.5-0.5b,grpo --workdir=gs://bucket/run
#
# On every worker (`gcloud compute tpus tpu-vm ssh NAME --worker=all`) it runs
#   cd REPO && .venv/bin/python -m launch.train ...
# with stdout and stderr tee'd into REPO/logs/RUN_ID/worker-$(hostname).log there
# (gcloud streams them too). When the command ends, failed or not, the logs are
# copied back (`gcloud compute tpus tpu-vm scp --worker=all --recurse`) into
# LOGS/RUN_ID/worker-*.log (by default logs/tpu_pod-<UTC timestamp>/, next to
# the other runs' logs), and the script exits with the command's status.
# JAX finds the pod by itself (jax.distributed.initialize() needs no flags on
# Cloud TPU), so no coordinator address is passed. The command's first word is
# taken from REPO/.venv/bin (`python` -> .venv/bin/python) unless it has a `/`.
# The checkout must already be on every worker, e.g.
#   gcloud compute tpus tpu-vm ssh NAME --zone=ZONE --worker=all \
#       --command='git clone https://github.com/OWNER/rlvr-jax ~/rlvr-jax'
# The workdir is on object storage by default: TPU VMs have no shared disk, and
# every worker must write into and resume from the same checkpoints (a local path
# would give each worker its own copy, and a restarted pod could not resume). A
# launch.train or launch.sft command without --workdir gets
# --workdir=gs://BUCKET/RUN_ID (--bucket); one with a local --workdir is refused
# unless --shared-disk says that path is a disk every worker mounts. To resume a
# run whose workdir came from --bucket, rerun with the same TPU_POD_RUN_ID.
#
# Options (each also settable by the environment variable after it):
#   --tpu NAME      TPU VM name (required)                            TPU_POD_NAME
#   --zone ZONE     its zone (required)                               TPU_POD_ZONE
#   --project P     its project (default: gcloud's configured one)    TPU_POD_PROJECT
#   --repo DIR      the checkout on the workers (default ~/rlvr-jax;   TPU_POD_REPO
#                   relative paths are relative to the remote home)
#   --setup         first run SETUP_CMD in REPO on every worker       TPU_POD_SETUP=1
#                   (default: python3 -m venv .venv && .venv/bin/pip install -U pip
#                   && .venv/bin/pip install -e ".[tpu,gcs]")
#   --logs DIR      local directory the logs are collected in, as      TPU_POD_LOGS
#                   DIR/RUN_ID/worker-*.log (default logs)
#   --bucket NAME   the default workdir gs://NAME/RUN_ID for a         TPU_POD_BUCKET
#                   launch.train or launch.sft command without --workdir
#   --shared-disk   accept a local --workdir (a disk mounted on   TPU_POD_SHARED_DISK=1
#                   every worker, e.g. Filestore)
#   --dry-run       print the gcloud commands instead of running them TPU_POD_DRY_RUN=1
#   -h, --help      print this help
# RUN_ID is tpu_pod-<UTC timestamp> unless TPU_POD_RUN_ID is set.
# A bad or missing argument fails before anything runs, with one `error: ...`
# line on stderr and exit status 2.
set -euo pipefail

usage() {  # the header comment above, without the leading '# '
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

die() {
  echo "error: $* (see $0 --help)" >&2
  exit 2
}

# One word for a shell: as is when it is safe, else in single quotes.
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

# A command line, quoted for a shell (the form --dry-run prints; --opt=VALUE
# words are written --opt='VALUE').
quote_all() {
  local sep="" word
  for word in "$@"; do
    printf '%s' "$sep"
    if [[ $word =~ ^--[A-Za-z0-9-]+= ]]; then
      printf '%s' "${BASH_REMATCH[0]}"
      quote "${word#"${BASH_REMATCH[0]}"}"
    else
      quote "$word"
    fi
    sep=" "
  done
}

# REPO for the remote shell: a leading ~ stays unquoted so that it expands there.
remote_dir() {
  case $1 in
    '~') printf '~' ;;
    [~]/*) printf '%s/' '~'; quote "${1#??}" ;;
    *) quote "$1" ;;
  esac
}

tpu=${TPU_POD_NAME:-}
zone=${TPU_POD_ZONE:-}
project=${TPU_POD_PROJECT:-}
repo=${TPU_POD_REPO:-'~/rlvr-jax'}
setup=${TPU_POD_SETUP:-0}
logs=${TPU_POD_LOGS:-}
bucket=${TPU_POD_BUCKET:-}
shared_disk=${TPU_POD_SHARED_DISK:-0}
dry_run=${TPU_POD_DRY_RUN:-0}
run_id=${TPU_POD_RUN_ID:-tpu_pod-$(date -u +%Y%m%d-%H%M%S)}
SETUP_CMD=${SETUP_CMD:-'python3 -m venv .venv && .venv/bin/pip install -U pip && .venv/bin/pip install -e ".[tpu,gcs]"'}

value() {  # the value of option $1 (given as $2, the rest of the command line)
  [[ $# -ge 2 && -n $2 && $2 != --* ]] || die "$1 needs a value"
}

saw_separator=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --tpu) value "$@"; tpu=$2; shift 2 ;;
    --tpu=*) tpu=${1#*=}; shift ;;
    --zone) value "$@"; zone=$2; shift 2 ;;
    --zone=*) zone=${1#*=}; shift ;;
    --project) value "$@"; project=$2; shift 2 ;;
    --project=*) project=${1#*=}; shift ;;
    --repo) value "$@"; repo=$2; shift 2 ;;
    --repo=*) repo=${1#*=}; shift ;;
    --logs) value "$@"; logs=$2; shift 2 ;;
    --logs=*) logs=${1#*=}; shift ;;
    --bucket) value "$@"; bucket=$2; shift 2 ;;
    --bucket=*) bucket=${1#*=}; shift ;;
    --shared-disk) shared_disk=1; shift ;;
    --setup) setup=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) saw_separator=1; shift; break ;;
    -*) die "unknown option: $1" ;;
    *) die "expected options, then -- and the command; got: $1" ;;
  esac
done

[[ $saw_separator == 1 ]] || die "no command: put it after --"
[[ $# -gt 0 && -n $1 ]] || die "no command after --"
[[ -n $tpu ]] || die "missing --tpu NAME"
[[ -n $zone ]] || die "missing --zone ZONE"
[[ -n $repo ]] || die "--repo is empty"
[[ $run_id =~ ^[A-Za-z0-9_.-]+$ ]] || die "TPU_POD_RUN_ID may only contain letters, digits, _ . -"
[[ $setup == 0 || $setup == 1 ]] || die "TPU_POD_SETUP must be 0 or 1, not: $setup"
[[ $dry_run == 0 || $dry_run == 1 ]] || die "TPU_POD_DRY_RUN must be 0 or 1, not: $dry_run"
[[ $shared_disk == 0 || $shared_disk == 1 ]] || die "TPU_POD_SHARED_DISK must be 0 or 1, not: $shared_disk"
[[ $bucket =~ ^[a-z0-9._-]*$ ]] || die "--bucket takes a bucket name (no gs://), not: $bucket"
logs=${logs:-logs}

# A run's workdir: on object storage (see the header), gs://BUCKET/RUN_ID by default.
entry=0 workdir="" prev=""
for word in "$@"; do
  [[ $prev != -m || ! $word =~ ^launch\.(train|sft)$ ]] || entry=1
  [[ $prev != --workdir ]] || workdir=$word
  [[ $word != --workdir=* ]] || workdir=${word#--workdir=}
  prev=$word
done
if [[ $entry == 1 && -z $workdir ]]; then
  [[ -n $bucket ]] || die "the command has no --workdir: pass --bucket NAME (it becomes gs://NAME/$run_id) or --workdir=gs://BUCKET/PATH"
  workdir=gs://$bucket/$run_id
  set -- "$@" --workdir="$workdir"
elif [[ $entry == 1 && $shared_disk == 0 && ! $workdir =~ ^(gs|s3):// ]]; then
  die "--workdir $workdir is a local path: TPU VMs have no shared disk, so each worker would checkpoint to its own and a restarted pod could not resume; use gs://BUCKET/PATH (or --shared-disk if every worker mounts it)"
fi

# The command on each worker: the first word from REPO/.venv/bin unless it is a path.
program=$1
shift
[[ $program == */* ]] || program=.venv/bin/$program
user_cmd=$(quote_all "$program" "$@")

rdir=$(remote_dir "$repo")
worker_logs="logs/$run_id"
run_cmd="cd $rdir && mkdir -p $worker_logs && set -o pipefail && export PYTHONUNBUFFERED=1 RLVR_DISTRIBUTED=1"
run_cmd+=" && $user_cmd 2>&1 | tee $worker_logs/worker-\"\$(hostname)\".log"
setup_cmd="cd $rdir && $SETUP_CMD"
# scp resolves a relative remote path from the remote home, so ~/ is dropped
remote_logs=${repo#"~/"}
[[ $repo != '~' && -n $remote_logs ]] || remote_logs=.
remote_logs="$tpu:$remote_logs/$worker_logs"

flags=(--zone="$zone")
[[ -z $project ]] || flags+=(--project="$project")
tpu_vm=(gcloud compute tpus tpu-vm)
setup_call=("${tpu_vm[@]}" ssh "$tpu" "${flags[@]}" --worker=all --command="$setup_cmd")
run_call=("${tpu_vm[@]}" ssh "$tpu" "${flags[@]}" --worker=all --command="$run_cmd")
collect_call=("${tpu_vm[@]}" scp "${flags[@]}" --worker=all --recurse "$remote_logs" "$logs")

if [[ $dry_run == 1 ]]; then
  [[ $setup == 0 ]] || { quote_all "${setup_call[@]}"; echo; }
  quote_all "${run_call[@]}"; echo
  quote_all "${collect_call[@]}"; echo
  exit 0
fi

command -v gcloud >/dev/null || die "gcloud not found on PATH (install the Google Cloud CLI)"
if [[ $setup == 1 ]]; then
  echo "tpu_pod: setup on every worker of $tpu" >&2
  status=0
  "${setup_call[@]}" || status=$?
  if [[ $status != 0 ]]; then
    echo "tpu_pod: setup failed (exit status $status)" >&2
    exit "$status"
  fi
fi

echo "tpu_pod: run $run_id on every worker of $tpu${workdir:+ (workdir $workdir)}" >&2
status=0
"${run_call[@]}" || status=$?
echo "tpu_pod: the command ended with exit status $status; collecting the logs" >&2
mkdir -p "$logs"  # so that scp puts the workers' RUN_ID directories together in it
if "${collect_call[@]}"; then
  echo "tpu_pod: logs in $logs/$run_id" >&2
else
  echo "tpu_pod: warning: collecting the logs failed" >&2
fi
exit "$status"
