# shellcheck shell=bash
# The previous release's `kairos` binary and configuration file, for tests/rolling_upgrade.rs
# (replicas of the previous release and of this one serving side by side through a migration).
#
# previous_release_build ROOT builds the commit below from the repository's own history into
# ROOT/target/previous-release/ (reused while the commit stays the same) and exports
# KAIROS_PREVIOUS_BIN and KAIROS_PREVIOUS_CONFIG. The build shares ROOT/target, so the
# dependencies compiled for this release are reused; it runs before this release's build, which
# then links its own binary again.
#
# Move PREVIOUS_RELEASE forward when a release is cut: it names the last commit of the release
# before this one (the schema through migrations/20261203000010_priorities.sql).
PREVIOUS_RELEASE=7de410a761c84ef896064875f0de7dd2a21d2b85

previous_release_build() {
    local root=$1
    local out=$root/target/previous-release
    if [[ -x $out/kairos && -f $out/kairos.toml && $(cat "$out/commit" 2>/dev/null) == "$PREVIOUS_RELEASE" ]]; then
        printf 'previous release %s: reusing %s\n' "${PREVIOUS_RELEASE:0:10}" "$out/kairos" >&2
    else
        if ! git -C "$root" cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null; then
            # A shallow clone: the rolling upgrade test says it was skipped and why.
            printf 'WARNING: the previous release (commit %s) is not in this clone (a shallow clone?):\n' \
                "$PREVIOUS_RELEASE" >&2
            printf 'WARNING: tests/rolling_upgrade.rs will be SKIPPED; clone with history (no --depth) to run it\n' >&2
            export KAIROS_PREVIOUS_UNAVAILABLE="commit $PREVIOUS_RELEASE is not in this clone"
            return 0
        fi
        printf 'previous release %s: building its kairos binary\n' "${PREVIOUS_RELEASE:0:10}" >&2
        rm -rf "$out"
        mkdir -p "$out/src"
        git -C "$root" archive "$PREVIOUS_RELEASE" | tar -x -C "$out/src"
        (cd "$out/src" && CARGO_TARGET_DIR=$root/target cargo build --locked --bin kairos) || return 1
        cp "$root/target/debug/kairos" "$out/kairos"
        cp "$out/src/config/kairos.toml" "$out/kairos.toml"
        rm -rf "$out/src"
        printf '%s\n' "$PREVIOUS_RELEASE" >"$out/commit"
    fi
    export KAIROS_PREVIOUS_BIN=$out/kairos
    export KAIROS_PREVIOUS_CONFIG=$out/kairos.toml
}
