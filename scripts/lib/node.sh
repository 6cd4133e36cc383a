# shellcheck shell=bash
# Shared by scripts/ts-sdk-test: find (and, when missing, install) Node.js 20 or newer and npm,
# which the TypeScript SDK's checks need. Source it; it defines functions only and changes no
# shell options.
#
# Environment:
#   KAIROS_NODE_INSTALL  0: print the install command instead of running it.
#
# The caller may set NODE_LOG_NAME as the prefix of progress lines.

# shellcheck source=scripts/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

node_log() { printf '%s: %s\n' "${NODE_LOG_NAME:-scripts/lib/node.sh}" "$*" >&2; }

# The major version of `node` on PATH, or nothing when there is none.
node_major() {
    command -v node >/dev/null 2>&1 || return 0
    node -p 'process.versions.node.split(".")[0]' 2>/dev/null || true
}

# Install Node.js and npm with apt on Debian and Ubuntu (as root, or through sudo), saying what it
# runs. Elsewhere, print what to install and return 1.
node_install() {
    local -a packages=(nodejs npm)
    if [[ ${KAIROS_NODE_INSTALL:-1} == 0 ]]; then
        node_log "not installing (KAIROS_NODE_INSTALL=0)."
    elif apt_platform; then
        # A Node.js that ships its own npm (as some packagings do) conflicts with Debian's npm
        # package: then only what is missing is installed.
        if command -v node >/dev/null 2>&1; then
            packages=(npm)
        fi
        apt_install node_log "${packages[*]}" "${packages[@]}"
        return
    fi
    node_log "Install Node.js 20 or newer with npm, for example:"
    node_log "  Debian/Ubuntu:  sudo apt-get install -y nodejs npm"
    node_log "  macOS:          brew install node"
    node_log "then run this again (or set KAIROS_SKIP_SDK=1 to skip the SDKs' checks)."
    return 1
}

# node and npm on PATH, Node.js 20 or newer; installs them when missing; exits 1 saying what to
# do when that fails or the Node.js found is too old.
node_require() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        node_log "node or npm not found (needed by the TypeScript SDK's checks)."
        node_install || exit 1
        if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
            node_log "error: the install finished but node or npm is still not found."
            exit 1
        fi
    fi
    local major
    major=$(node_major)
    if [[ -z $major || $major -lt 20 ]]; then
        node_log "error: the TypeScript SDK needs Node.js 20 or newer; $(command -v node) is $(node --version 2>/dev/null || echo 'of unknown version')."
        node_log "Install Node.js 20 or newer and run again (or set KAIROS_SKIP_SDK=1 to skip the SDKs' checks)."
        exit 1
    fi
    node_log "using node $(node --version) and npm $(npm --version) ($(command -v node))"
}
