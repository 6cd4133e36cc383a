# shellcheck shell=bash
# Shared by scripts/test and .ci/run: find (and, when missing, install) PgBouncer, which the
# tests of kairos behind a pooler (tests/pgbouncer.rs) start in front of their own PostgreSQL.
# Source it; it defines functions and PGBOUNCER_* variables only and changes no shell options.
#
# Environment:
#   KAIROS_PGBOUNCER          the pgbouncer binary to use instead of `pgbouncer` on PATH
#                             (the tests read it too).
#   KAIROS_PGBOUNCER_INSTALL  0: print the install command instead of running it.
#
# The caller may set PGBOUNCER_LOG_NAME (else PG_LOG_NAME) as the prefix of progress lines.

# shellcheck source=scripts/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

PGBOUNCER_BIN= # the pgbouncer found

pgbouncer_log() { printf '%s: %s\n' "${PGBOUNCER_LOG_NAME:-${PG_LOG_NAME:-scripts/lib/pgbouncer.sh}}" "$*" >&2; }

# Sets PGBOUNCER_BIN; returns 1, silently, when there is none. An override that names no
# executable is an error (exit 1), never replaced by a search.
pgbouncer_find() {
    PGBOUNCER_BIN=
    if [[ -n ${KAIROS_PGBOUNCER:-} ]]; then
        if [[ ! -x $KAIROS_PGBOUNCER ]]; then
            pgbouncer_log "error: KAIROS_PGBOUNCER=$KAIROS_PGBOUNCER is not executable."
            exit 1
        fi
        PGBOUNCER_BIN=$KAIROS_PGBOUNCER
        return 0
    fi
    # Debian installs it in /usr/sbin, which a non-root PATH may lack.
    PGBOUNCER_BIN=$(command -v pgbouncer 2>/dev/null) || PGBOUNCER_BIN=
    if [[ -z $PGBOUNCER_BIN && -x /usr/sbin/pgbouncer ]]; then
        PGBOUNCER_BIN=/usr/sbin/pgbouncer
    fi
    [[ -n $PGBOUNCER_BIN ]]
}

# Install PgBouncer with the platform's package manager, saying what it runs: apt on Debian and
# Ubuntu (as root, or through sudo), Homebrew on macOS. Elsewhere, print the commands to run and
# return 1. KAIROS_PGBOUNCER_INSTALL=0 turns installing off (print only).
pgbouncer_install() {
    if [[ ${KAIROS_PGBOUNCER_INSTALL:-1} == 0 ]]; then
        pgbouncer_log "not installing (KAIROS_PGBOUNCER_INSTALL=0)."
    elif apt_platform; then
        # The package's own service is not wanted: the tests start their own PgBouncer.
        apt_install pgbouncer_log "PgBouncer (Debian package pgbouncer)" pgbouncer
        return
    elif [[ $(uname -s) == Darwin ]] && command -v brew >/dev/null 2>&1; then
        pgbouncer_log "installing PgBouncer with Homebrew:  brew install pgbouncer"
        brew install pgbouncer && return 0
        pgbouncer_log "error: brew install failed (above)."
        return 1
    fi
    pgbouncer_log "Install PgBouncer, for example:"
    pgbouncer_log "  Debian/Ubuntu:  sudo apt-get install -y pgbouncer"
    pgbouncer_log "  Fedora/RHEL:    sudo dnf install -y pgbouncer"
    pgbouncer_log "  macOS:          brew install pgbouncer"
    pgbouncer_log "or set KAIROS_PGBOUNCER to its binary."
    return 1
}

# pgbouncer_find; when none is found, install it (pgbouncer_install) and look again. Exits 1
# under CI (CI=true), where the tests behind PgBouncer must run; elsewhere says that those tests
# will skip, loudly, and returns.
pgbouncer_require() {
    if ! pgbouncer_find; then
        pgbouncer_log "PgBouncer not found on PATH or in /usr/sbin."
        if ! { pgbouncer_install && pgbouncer_find; }; then
            if [[ ${CI:-} == true ]]; then
                pgbouncer_log "error: PgBouncer is required under CI (tests/pgbouncer.rs)."
                exit 1
            fi
            pgbouncer_log "warning: without PgBouncer, tests/pgbouncer.rs skips its tests."
            return 0
        fi
    fi
    pgbouncer_log "using $PGBOUNCER_BIN ($("$PGBOUNCER_BIN" --version 2>/dev/null | head -n 1 || echo 'version unknown'))"
    export KAIROS_PGBOUNCER=$PGBOUNCER_BIN
}
