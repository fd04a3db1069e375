#!/usr/bin/env bash
# h2spec.sh install: builds h2spec, the HTTP/2 conformance suite, at the
# version pinned in tools/h2spec/go.mod (go.sum pins its dependencies;
# the main go.mod gets none of them) into bin/tools, when the binary there
# is missing or was built from another pin. Prints SURGE_H2SPEC_BIN=PATH.
# Installing needs only the Go module proxy. TestH2Spec (internal/api)
# runs the binary against the h2c server, net/http's and the lean one.
set -euo pipefail

cd "$(dirname "$0")/.."
go=${GO:-go}
TOOLS=$PWD/tools/h2spec
MODULE=github.com/summerwind/h2spec
VERSION=$(sed -n "s|^[[:space:]]*$MODULE \(v[^ ]*\).*|\1|p" "$TOOLS/go.mod")
BIN=$PWD/bin/tools/h2spec

die() {
	echo "h2spec.sh: $*" >&2
	exit 1
}

# installed: the binary is there and its build info names the pinned
# module version (a moved pin rebuilds it).
installed() {
	[[ -x $BIN ]] && "$go" version -m "$BIN" 2>/dev/null | grep -q "[[:space:]]$MODULE[[:space:]]*$VERSION\b"
}

install() {
	[ -n "$VERSION" ] || die "no $MODULE version in $TOOLS/go.mod"
	if ! installed; then
		echo "h2spec.sh: building h2spec $VERSION into bin/tools" >&2
		mkdir -p "$(dirname "$BIN")"
		local tmp=$BIN.tmp.$$
		# The binary lands under its final name only when complete, so two
		# installs at once never run half a file. The user's GOFLAGS and
		# go.work are for the main module, not this one.
		(cd "$TOOLS" && GOFLAGS= GOWORK=off "$go" build -mod=readonly -trimpath -o "$tmp" "$MODULE/cmd/h2spec") ||
			{ rm -f "$tmp"; die "go build $MODULE/cmd/h2spec@$VERSION failed (see above)"; }
		mv -f "$tmp" "$BIN"
		installed || die "$BIN is not h2spec $VERSION after building"
	fi
	echo "SURGE_H2SPEC_BIN=$BIN"
}

case "${1:-}" in
install) install ;;
*) die "usage: $0 install" ;;
esac
