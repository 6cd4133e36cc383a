# shellcheck shell=bash
# Shared by scripts/test and scripts/run (and .ci/run): find the PostgreSQL server binaries and
# create / start a private cluster owned by an unprivileged user. Source it; it defines functions
# and PG_* variables only and changes no shell options.
#
# Environment:
#   KAIROS_PG_BINDIR  use the initdb/pg_ctl in this directory instead of searching for them.
#
# The caller sets PG_LOG_NAME (the prefix of progress lines, e.g. "scripts/test").

# shellcheck source=scripts/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

PG_LOG_NAME=${PG_LOG_NAME:-scripts/lib/pg.sh}
PG_BINDIR=          # directory holding initdb, pg_ctl and postgres
PG_OWNER=           # OS user that owns and runs the cluster
PG_SUPERUSER=kairos # bootstrap superuser created by initdb
PG_PASSWORD=kairos

pg_log() { printf '%s: %s\n' "$PG_LOG_NAME" "$*" >&2; }
pg_die() {
    pg_log "error: $*"
    exit 1
}

# Sets PG_BINDIR to a directory with initdb and pg_ctl: KAIROS_PG_BINDIR when set, else the
# directory initdb on PATH really lives in, else the newest /usr/lib/postgresql/*/bin (Debian and
# Ubuntu keep the server binaries there, off PATH). Returns 1, silently, when there is none.
pg_find_bindir() {
    PG_BINDIR=
    local dir initdb
    if [[ -n ${KAIROS_PG_BINDIR:-} ]]; then
        [[ -x $KAIROS_PG_BINDIR/initdb && -x $KAIROS_PG_BINDIR/pg_ctl ]] || return 1
        PG_BINDIR=$KAIROS_PG_BINDIR
        return 0
    fi
    if initdb=$(command -v initdb 2>/dev/null) && [[ -n $initdb ]]; then
        dir=$(dirname -- "$(readlink -f -- "$initdb")")
        if [[ -x $dir/pg_ctl ]]; then
            PG_BINDIR=$dir
            return 0
        fi
    fi
    # Newest version first ("15" sorts after "9.6" with sort -V).
    while IFS= read -r dir; do
        if [[ -x $dir/initdb && -x $dir/pg_ctl ]]; then
            PG_BINDIR=$dir
            return 0
        fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV)
    # Homebrew's postgresql@N formulae are keg-only: not on PATH.
    if command -v brew >/dev/null 2>&1; then
        while IFS= read -r dir; do
            if [[ -x $dir/initdb && -x $dir/pg_ctl ]]; then
                PG_BINDIR=$dir
                return 0
            fi
        done < <(printf '%s\n' "$(brew --prefix)"/opt/postgresql@*/bin | sort -rV)
    fi
    return 1
}

# Install PostgreSQL's server binaries with the platform's package manager, saying what it runs:
# apt on Debian and Ubuntu (as root, or through sudo), Homebrew on macOS. Elsewhere, print the
# commands to run and return 1. KAIROS_PG_INSTALL=0 turns installing off (print only).
pg_install_server() {
    if [[ ${KAIROS_PG_INSTALL:-1} == 0 ]]; then
        pg_log "not installing (KAIROS_PG_INSTALL=0)."
    elif apt_platform; then
        apt_install pg_log "PostgreSQL's server binaries (Debian package postgresql)" postgresql
        return
    elif [[ $(uname -s) == Darwin ]] && command -v brew >/dev/null 2>&1; then
        pg_log "installing PostgreSQL's server binaries with Homebrew:  brew install postgresql@16"
        brew install postgresql@16 && return 0
        pg_log "error: brew install failed (above)."
        return 1
    fi
    pg_log "Install PostgreSQL's server binaries (initdb, pg_ctl), for example:"
    pg_log "  Debian/Ubuntu:  sudo apt-get install -y postgresql"
    pg_log "  Fedora/RHEL:    sudo dnf install -y postgresql-server"
    pg_log "  macOS:          brew install postgresql@16"
    pg_log "then run this again, or set KAIROS_PG_BINDIR to their directory, or DATABASE_URL to an"
    pg_log "existing PostgreSQL server (the role needs CREATEDB)."
    return 1
}

# pg_find_bindir; when none is found, install the server binaries (pg_install_server) and look
# again; exit 1 saying what to do if that fails.
pg_require_bindir() {
    if ! pg_find_bindir; then
        if [[ -n ${KAIROS_PG_BINDIR:-} ]]; then
            pg_die "KAIROS_PG_BINDIR=$KAIROS_PG_BINDIR has no initdb and pg_ctl."
        fi
        pg_log "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH, in /usr/lib/postgresql/*/bin or in Homebrew's prefix."
        pg_install_server || exit 1
        pg_find_bindir || pg_die "the install finished but initdb and pg_ctl are still not found."
    fi
    pg_log "using PostgreSQL from $PG_BINDIR ($("$PG_BINDIR/postgres" --version 2>/dev/null || echo 'version unknown'))"
}

# Sets PG_OWNER. PostgreSQL refuses to run as root, so as root the cluster belongs to "postgres"
# when that user exists, else "nobody"; otherwise to the current user. An existing data directory
# ($1, optional) keeps the owner it has.
pg_choose_owner() {
    local existing=${1:-}
    if [[ $(id -u) -ne 0 ]]; then
        PG_OWNER=$(id -un)
        if [[ -n $existing && -e $existing && $(stat -c %U -- "$existing") != "$PG_OWNER" ]]; then
            pg_die "$existing belongs to $(stat -c %U -- "$existing"), not $PG_OWNER; run as that user or root."
        fi
        return 0
    fi
    if [[ -n $existing && -e $existing ]]; then
        PG_OWNER=$(stat -c %U -- "$existing")
        [[ $PG_OWNER != root ]] || pg_die "$existing is owned by root; PostgreSQL cannot run as root."
    elif id -u postgres >/dev/null 2>&1; then
        PG_OWNER=postgres
    else
        PG_OWNER=nobody
    fi
}

# Runs a command as PG_OWNER, from / (so an unreadable current directory does not matter).
pg_as_owner() {
    if [[ $PG_OWNER == "$(id -un)" ]]; then
        (cd / && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && runuser -u "$PG_OWNER" -- "$@")
    else
        local cmd
        printf -v cmd '%q ' "$@"
        (cd / && su -s /bin/bash "$PG_OWNER" -c "$cmd")
    fi
}

# Gives directory $1 to PG_OWNER and checks that PG_OWNER can reach it (every parent directory
# must be searchable by that user).
pg_give_dir() {
    local dir=$1
    if [[ $(id -u) -eq 0 ]]; then
        chown "$PG_OWNER:" -- "$dir"
    fi
    pg_as_owner test -w "$dir" -a -x "$dir" ||
        pg_die "user $PG_OWNER cannot write to $dir (is a parent directory private?)."
}

# Prints a TCP port on 127.0.0.1 that nothing listens on right now.
pg_free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null && return 0
    fi
    local port
    for ((port = 54329 + RANDOM % 500; port < 60000; port++)); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# pg_init_cluster DATADIR SOCKDIR [postgresql.conf lines...]
# Creates a cluster in DATADIR (its parent must belong to PG_OWNER) with superuser
# kairos/kairos, trust for unix-socket connections, password (scram) for TCP from 127.0.0.1,
# listening on 127.0.0.1 only with its unix socket in SOCKDIR. Extra arguments are appended to
# postgresql.conf. The port is given at start.
pg_init_cluster() {
    local data=$1 sock=$2 parent pwfile line
    shift 2
    parent=$(dirname -- "$data")
    pwfile=$parent/.pwfile.$$
    pg_as_owner mkdir -p -- "$sock"
    # The socket path (dir + "/.s.PGSQL.NNNNN") must fit in 107 bytes; without one, TCP only.
    if ((${#sock} > 90)); then
        pg_log "note: $sock is too long for a unix socket path; the cluster listens on TCP only."
        sock=
    fi
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
    pg_as_owner sh -c 'umask 077 && printf "%s\n" "$1" > "$2"' sh "$PG_PASSWORD" "$pwfile"
    if ! pg_as_owner "$PG_BINDIR/initdb" --pgdata="$data" --username="$PG_SUPERUSER" \
        --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C --no-sync >"$parent/initdb.log" 2>&1; then
        rm -f -- "$pwfile"
        cat "$parent/initdb.log" >&2
        pg_die "initdb failed (output above)."
    fi
    rm -f -- "$pwfile"
    {
        echo
        echo "# Added by scripts/lib/pg.sh"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$sock'"
        for line in "$@"; do echo "$line"; done
    } | pg_as_owner tee -a "$data/postgresql.conf" >/dev/null
}

# pg_start DATADIR PORT LOGFILE: starts the cluster, waiting until it accepts connections.
# Returns 2 when the port was taken (the caller may retry with another), exits on other errors.
pg_start() {
    local data=$1 port=$2 log=$3 seen=0 out
    [[ $port =~ ^[0-9]+$ ]] || pg_die "invalid port: $port"
    [[ -f $log ]] && seen=$(wc -l <"$log") # the log may be reused: only read what this start adds
    # (pg_ctl sends the server's own output to $log, so the substitution does not wait for it.)
    if out=$(pg_as_owner "$PG_BINDIR/pg_ctl" --pgdata="$data" --log="$log" --wait --timeout=60 \
        --options="-p $port" start 2>&1); then
        return 0
    fi
    if tail -n +"$((seen + 1))" "$log" 2>/dev/null | grep -q 'Address already in use'; then
        return 2
    fi
    printf '%s\n' "$out" >&2
    tail -n +"$((seen + 1))" "$log" 2>/dev/null | tail -n 20 >&2 || true
    pg_die "PostgreSQL failed to start (server log above: $log)."
}

# Prints the port of the running cluster in DATADIR (line 4 of postmaster.pid).
pg_running_port() {
    sed -n 4p "$1/postmaster.pid"
}

# pg_stop DATADIR [MODE]: stops the cluster if it runs; never fails.
pg_stop() {
    local data=$1 mode=${2:-fast}
    if [[ -f $data/postmaster.pid ]]; then
        pg_as_owner "$PG_BINDIR/pg_ctl" --pgdata="$data" --mode="$mode" --wait stop >/dev/null 2>&1 || true
    fi
}
