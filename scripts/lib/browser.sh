# shellcheck shell=bash
# Shared by scripts/test and .ci/run: find (and, when missing, install) the headless Chromium
# and the chromedriver that the console's end-to-end tests (tests/console_e2e.rs) drive. Source
# it; it defines functions and BROWSER_* variables only and changes no shell options.
#
# Environment:
#   KAIROS_CHROMEDRIVER     the chromedriver to use instead of `chromedriver` on PATH.
#   KAIROS_CHROMIUM         the browser to use instead of the one chromedriver finds.
#   KAIROS_BROWSER_INSTALL  0: print the install command instead of running it.
#
# The caller may set BROWSER_LOG_NAME (else PG_LOG_NAME) as the prefix of progress lines.

# shellcheck source=scripts/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

BROWSER_DRIVER= # the chromedriver found
BROWSER_BIN=    # the browser found

browser_log() { printf '%s: %s\n' "${BROWSER_LOG_NAME:-${PG_LOG_NAME:-scripts/lib/browser.sh}}" "$*" >&2; }

# Sets BROWSER_DRIVER and BROWSER_BIN; returns 1, silently, when either is missing. An override
# that names no executable is an error (exit 1), never replaced by a search.
browser_find() {
    BROWSER_DRIVER=
    BROWSER_BIN=
    local name
    if [[ -n ${KAIROS_CHROMEDRIVER:-} ]]; then
        if [[ ! -x $KAIROS_CHROMEDRIVER ]]; then
            browser_log "error: KAIROS_CHROMEDRIVER=$KAIROS_CHROMEDRIVER is not executable."
            exit 1
        fi
        BROWSER_DRIVER=$KAIROS_CHROMEDRIVER
    else
        BROWSER_DRIVER=$(command -v chromedriver 2>/dev/null) || BROWSER_DRIVER=
    fi
    if [[ -n ${KAIROS_CHROMIUM:-} ]]; then
        if [[ ! -x $KAIROS_CHROMIUM ]]; then
            browser_log "error: KAIROS_CHROMIUM=$KAIROS_CHROMIUM is not executable."
            exit 1
        fi
        BROWSER_BIN=$KAIROS_CHROMIUM
    else
        for name in chromium chromium-browser google-chrome google-chrome-stable; do
            if BROWSER_BIN=$(command -v "$name" 2>/dev/null); then
                break
            fi
            BROWSER_BIN=
        done
        # macOS keeps the browser in an app bundle, off PATH.
        for name in "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" \
            "/Applications/Chromium.app/Contents/MacOS/Chromium"; do
            if [[ -z $BROWSER_BIN && -x $name ]]; then
                BROWSER_BIN=$name
            fi
        done
    fi
    [[ -n $BROWSER_DRIVER && -n $BROWSER_BIN ]]
}

# Install Chromium and chromedriver with the platform's package manager, saying what it runs:
# apt on Debian and Ubuntu (as root, or through sudo), Homebrew on macOS. Elsewhere, print the
# commands to run and return 1. KAIROS_BROWSER_INSTALL=0 turns installing off (print only).
browser_install() {
    local -a packages=(chromium chromium-driver)
    if grep -qiE '^ID=.*ubuntu' /etc/os-release 2>/dev/null; then
        packages=(chromium-browser chromium-chromedriver)
    fi
    if [[ ${KAIROS_BROWSER_INSTALL:-1} == 0 ]]; then
        browser_log "not installing (KAIROS_BROWSER_INSTALL=0)."
    elif apt_platform; then
        apt_install browser_log "Chromium and chromedriver (packages ${packages[*]})" "${packages[@]}"
        return
    elif [[ $(uname -s) == Darwin ]] && command -v brew >/dev/null 2>&1; then
        local -a casks=(chromedriver)
        [[ -n $BROWSER_BIN ]] || casks+=(google-chrome)
        browser_log "installing with Homebrew:  brew install --cask ${casks[*]}"
        brew install --cask "${casks[@]}" && return 0
        browser_log "error: brew install failed (above)."
        return 1
    fi
    browser_log "Install Chromium and chromedriver, for example:"
    browser_log "  Debian:         sudo apt-get install -y chromium chromium-driver"
    browser_log "  Ubuntu:         sudo apt-get install -y chromium-browser chromium-chromedriver"
    browser_log "  Fedora/RHEL:    sudo dnf install -y chromium chromedriver"
    browser_log "  macOS:          brew install --cask chromedriver google-chrome"
    browser_log "then run this again, or set KAIROS_CHROMEDRIVER and KAIROS_CHROMIUM to their paths."
    return 1
}

# browser_find; when something is missing, install it (browser_install) and look again; exit 1
# saying what to do if that fails.
browser_require() {
    if ! browser_find; then
        browser_log "Chromium or chromedriver not found (needed by the console's end-to-end tests)."
        browser_install || exit 1
        if ! browser_find; then
            browser_log "error: the install finished but Chromium or chromedriver is still not found."
            exit 1
        fi
    fi
    browser_log "using $BROWSER_DRIVER ($("$BROWSER_DRIVER" --version 2>/dev/null | head -n 1 || echo 'version unknown')) with $BROWSER_BIN"
}
