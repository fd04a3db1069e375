#!/usr/bin/env bash
# staticcheck.sh [PACKAGES...]: runs staticcheck at the version pinned below
# over PACKAGES (default ./...) and exits non-zero on any finding. It first
# installs that version into bin/tools when the binary there is missing, is
# another version, or was built by another Go than the one this module
# builds with (staticcheck reads code only as new as the Go that built it).
# Installing needs only the Go module proxy.
set -euo pipefail

# Release 2026.2.2; it reads Go 1.26 code. To move the pin, change it here,
# run `make staticcheck` and fix or justify (staticcheck.conf) what it finds.
STATICCHECK_VERSION=v0.8.2

cd "$(dirname "$0")/.."
go=${GO:-go}
tools=$PWD/bin/tools
bin=$tools/staticcheck
# Asked here, inside the module, so that it names the toolchain go.mod selects.
gover=$("$go" env GOVERSION)

installed() {
	[[ -x $bin ]] &&
		[[ $("$bin" -version) == *"(${STATICCHECK_VERSION#v})" ]] &&
		[[ $("$go" version "$bin") == *": $gover" ]]
}

if ! installed; then
	echo "installing staticcheck $STATICCHECK_VERSION (built by $gover) into bin/tools" >&2
	# The user's GOFLAGS (e.g. -mod=vendor) and go.work are for this module,
	# not for a tool installed at a version; GOTOOLCHAIN builds it with the
	# same Go that builds the module.
	GOBIN=$tools GOFLAGS= GOWORK=off GOTOOLCHAIN=$gover \
		"$go" install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
	installed || {
		echo "staticcheck.sh: $bin is not staticcheck $STATICCHECK_VERSION built by $gover after installing" >&2
		exit 1
	}
fi

if [[ $# -eq 0 ]]; then
	set -- ./...
fi
exec "$bin" "$@"
