# shellcheck shell=bash
# Shared by the install steps of scripts/lib (pg.sh, pgbouncer.sh, browser.sh, node.sh): Debian
# packages installed with apt, as root or through sudo, saying what runs. Source it; it defines
# functions only and changes no shell options.

# Whether this machine installs with apt (Debian, Ubuntu).
apt_platform() {
    [[ -r /etc/os-release ]] && grep -qiE '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release &&
        command -v apt-get >/dev/null 2>&1
}

# apt_install LOG WHAT PACKAGE...: install the packages (WHAT says what they are, for people),
# printing through the function LOG what it runs. Returns 1 when it cannot: no root and no sudo,
# or apt-get failed.
apt_install() {
    local log=$1 what=$2
    shift 2
    local -a sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            "$log" "error: installing needs root, and sudo is not available."
            "$log" "As root, run:  apt-get update && apt-get install -y $*"
            return 1
        fi
        sudo=(sudo)
    fi
    "$log" "installing $what:"
    "$log" "  ${sudo[*]:+${sudo[*]} }apt-get update && ${sudo[*]:+${sudo[*]} }apt-get install -y $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" &&
        return 0
    "$log" "error: apt-get failed (above)."
    return 1
}
