# shellcheck shell=bash
# Environment and launch helper shared by the slurm/*.sbatch templates.
#
# A template sources this file; sourcing sets up the environment, and the
# template then calls `hpcdist_launch CMD ...` to run CMD on every task.
#
# Finding this file: sbatch copies the batch script into a spool directory
# (e.g. /var/spool/slurmd/job123/slurm_script) and runs the copy, so a
# template cannot look next to "$0". It sources
#     ${HPCDIST_SLURM_DIR:-$SLURM_SUBMIT_DIR/slurm}/common.sh
# that is, slurm/ in the directory sbatch was run from. Submit from the
# repository root, or export HPCDIST_SLURM_DIR=/path/to/hpcdist/slurm before
# sbatch (sbatch passes the environment on to the job).
#
# Variables read here (all optional):
#   HPCDIST_VENV           environment with hpcdist, mpi4py and an MPI
#                          (default: $PWD/.venv; the job starts in the
#                          submit directory)
#   HPCDIST_LAUNCHER       srun or mpiexec (default: srun when it exists; the
#                          single-node template defaults to mpiexec)
#   HPCDIST_SRUN_MPI       srun's --mpi plugin (default: guessed from the MPI,
#                          see hpcdist_srun_mpi below)
#   HPCDIST_LAUNCHER_ARGS  extra launcher options, split on spaces
#   HPCDIST_MAX_RESTARTS   restarts after failed attempts (hpcdist run
#                          --max-restarts; default 0)
#   HPCDIST_FAULT_TOLERANCE  shrink: survive lost ranks (hpcdist run
#                          --fault-tolerant; fault_tolerant.sbatch sets it)
#   HPCDIST_STALL_TIMEOUT  seconds before a stuck collective ends the job
#                          with a diagnosis (default 600)
#   HPCDIST_TERM_STALL_TIMEOUT  the same after SIGTERM, inside a checkpointed
#                          fit (default 3: a rank died, srun ended the step)

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "slurm/common.sh is sourced by the slurm/*.sbatch templates, not run" >&2
    exit 1
fi

HPCDIST_VENV=${HPCDIST_VENV:-$PWD/.venv}
if [[ ! -x "$HPCDIST_VENV/bin/hpcdist" ]]; then
    echo "error: HPCDIST_VENV=$HPCDIST_VENV has no bin/hpcdist; create it with scripts/test" \
         "(or pip install hpcdist into an environment) and export HPCDIST_VENV=/path/to/it" >&2
    exit 1
fi
# like `source $HPCDIST_VENV/bin/activate`: python, hpcdist and mpiexec come from it
export VIRTUAL_ENV=$HPCDIST_VENV PATH=$HPCDIST_VENV/bin:$PATH

HPCDIST_RANKS=${SLURM_NTASKS:-1}
HPCDIST_THREADS=${SLURM_CPUS_PER_TASK:-1}

# One BLAS/OpenMP/Numba thread pool per rank, sized to the cores Slurm gave
# the task, so that ranks x threads never exceeds the cores.
export OMP_NUM_THREADS=$HPCDIST_THREADS OPENBLAS_NUM_THREADS=$HPCDIST_THREADS
export MKL_NUM_THREADS=$HPCDIST_THREADS NUMBA_NUM_THREADS=$HPCDIST_THREADS
# Slurm 22.05 to 23.02 no longer pass --cpus-per-task from sbatch to srun;
# this variable does, in every version.
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
fi

# Numba's compiled kernels: NUMBA_CACHE_DIR when you set it, otherwise
# hpcdist's persistent per-user cache ($XDG_CACHE_HOME/hpcdist/numba, or
# ~/.cache/hpcdist/numba), so that a job loads what earlier jobs compiled.
# Fill it once per installation (and again after upgrading hpcdist or Numba)
# with `hpcdist compile`, in a short job on the partition's node type or on a
# login node of the same CPU; a job then starts without compiling. Ranks that
# find a kernel missing compile it once per cache: the others wait for it. A
# per-job folder on node-local storage (NUMBA_CACHE_DIR=$TMPDIR/...) makes
# every job compile everything again.
if [[ -n ${NUMBA_CACHE_DIR:-} ]]; then
    export NUMBA_CACHE_DIR
fi

# HDF5 >= 1.10 locks a file when it opens it; Lustre, GPFS and NFS mounts
# often do not support that lock, and opening a data set or checkpoint there
# fails with "unable to lock file". hpcdist's ranks coordinate their own
# reads and writes, so the lock adds nothing.
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}

# a collective stuck this long ends the job with a diagnosis instead of
# burning the allocation
export HPCDIST_STALL_TIMEOUT=${HPCDIST_STALL_TIMEOUT:-600}

# srun's --mpi plugin for the MPI in the environment (cpu_multi_node.sbatch
# explains which MPI needs which): Open MPI -> pmix; MPICH (the mpich
# wheel), Intel MPI, MVAPICH -> pmi2. HPCDIST_SRUN_MPI overrides the guess
# (e.g. cray_shasta for Cray MPICH). Prints nothing when SLURM_MPI_TYPE is
# set (srun reads it) or the MPI is not recognised (srun then uses the
# cluster's MpiDefault).
hpcdist_srun_mpi() {
    if [[ -n ${HPCDIST_SRUN_MPI:-} ]]; then
        echo "$HPCDIST_SRUN_MPI"
    elif [[ -z ${SLURM_MPI_TYPE:-} ]]; then
        case $(mpiexec --version 2>&1 || true) in
            *"Open MPI"* | *OpenRTE*) echo pmix ;;
            *HYDRA* | *"Intel(R) MPI"* | *MPICH* | *MVAPICH*) echo pmi2 ;;
        esac
    fi
}

# The mpich wheel under srun's pmi2: its default network module, UCX,
# publishes its address through PMI, and Slurm's pmi2 plugin (22.05) read
# those requests out of step ("value not properly terminated in client
# request", then UCX's "failed to unpack address"): MPI_Init failed in about
# one job in four across two nodes. Its OFI module works there (3 of 3), so
# it is the default unless MPIR_CVAR_CH4_NETMOD is set. A system MPICH is
# left alone.
hpcdist_mpich_wheel_netmod() {
    if [[ $1 == pmi2 && -z ${MPIR_CVAR_CH4_NETMOD:-} && -x $HPCDIST_VENV/bin/mpiexec &&
          $(command -v mpiexec) == "$HPCDIST_VENV/bin/mpiexec" ]] &&
       [[ $(mpiexec --version 2>&1 || true) == *HYDRA* ]]; then
        export MPIR_CVAR_CH4_NETMOD=ofi
    fi
}

# Whether the job was cancelled (scancel, which also sends SIGTERM). While its
# batch script still runs, Slurm (22.05 at least) shows such a job as
# COMPLETING, and as CANCELLED once it has ended; a running job reads RUNNING.
# A template must then neither requeue it (scontrol requeue also takes
# cancelled jobs, and the job would run again) nor submit the next one.
hpcdist_job_cancelled() {
    local state
    state=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null || true)
    [[ $state == *JobState=CANCELLED* || $state == *JobState=COMPLETING* ]]
}

# Forward a signal the batch shell received to the job step.
_hpcdist_forward() {
    echo "hpcdist: the batch shell received SIG$1; forwarding it to the job step" >&2
    kill -s "$1" "$_hpcdist_step_pid" 2>/dev/null || true
}

# hpcdist_launch CMD [ARGS...]
# Run CMD on all $SLURM_NTASKS tasks under `hpcdist run` (which reports
# which rank failed and how, and restarts failed attempts) and return its
# exit status: 0, 75 when the job wrote a checkpoint on a signal and wants to
# be resumed, anything else on failure.
#
# The step runs in the background while the batch shell waits for it: bash
# runs a trap only between commands, so a shell running the step in the
# foreground would act on `--signal=B:USR1@...` only after the step ended.
# USR1 and TERM are passed on to the step; hpcdist run hands them to every
# rank, and hpcdist's training loops stop at the next step boundary with a
# checkpoint and exit code 75.
hpcdist_launch() {
    local launcher=${HPCDIST_LAUNCHER:-}
    if [[ -z $launcher ]]; then
        if command -v srun >/dev/null; then launcher=srun; else launcher=mpiexec; fi
    fi
    local -a run=(hpcdist run -n "$HPCDIST_RANKS" --launcher "$launcher"
                  --max-restarts "${HPCDIST_MAX_RESTARTS:-0}")
    local extra=${HPCDIST_LAUNCHER_ARGS:-} mpi
    if [[ $launcher == srun ]]; then
        mpi=$(hpcdist_srun_mpi)
        extra=${mpi:+--mpi=$mpi${extra:+ }}$extra
        hpcdist_mpich_wheel_netmod "$mpi"
    fi
    if [[ -n $extra ]]; then
        run+=("--launcher-args=$extra")
    fi
    if [[ -n ${HPCDIST_FAULT_TOLERANCE:-} ]]; then
        run+=(--fault-tolerant "$HPCDIST_FAULT_TOLERANCE")
    fi
    echo "hpcdist job ${SLURM_JOB_ID:-local}: $HPCDIST_RANKS ranks x $HPCDIST_THREADS threads" \
         "on ${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} node(s), batch shell on $HOSTNAME;" \
         "launcher $launcher${extra:+ $extra}"
    "${run[@]}" -- "$@" &
    _hpcdist_step_pid=$!
    trap '_hpcdist_forward USR1' USR1
    trap '_hpcdist_forward TERM' TERM
    # a trapped signal ends `wait` early (status > 128) while the step runs on
    while kill -0 "$_hpcdist_step_pid" 2>/dev/null; do
        wait "$_hpcdist_step_pid" || true
    done
    wait "$_hpcdist_step_pid"  # bash keeps the step's exit status
}
