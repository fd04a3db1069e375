#!/usr/bin/env bash
# A real headless Chromium for the console's browser tests: Debian's
# `chromium` package, installed with apt-get when no chromium is on PATH.
# The tests (internal/console) start it themselves through chromedp with
# the flags below; this script only installs it and says where it is.
#
#   scripts/chromium.sh install   apt-get install chromium (as root, or via sudo)
#   scripts/chromium.sh path      print the browser's path (after install)
#   scripts/chromium.sh flags     print the flags the tests start it with
set -euo pipefail

die() {
	echo "chromium.sh: $*" >&2
	exit 1
}

find_browser() {
	local b
	for b in chromium chromium-browser; do
		if command -v "$b" >/dev/null 2>&1; then
			command -v "$b"
			return 0
		fi
	done
	return 1
}

install() {
	if find_browser >/dev/null; then
		return
	fi
	command -v apt-get >/dev/null 2>&1 || die "chromium not found and no apt-get: install Chromium (Debian: apt-get install chromium)"
	local sudo=()
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "chromium not found; run as root or install it: apt-get install chromium"
		sudo=(sudo -n)
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2 ||
		{ "${sudo[@]}" apt-get update >&2 && "${sudo[@]}" apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2; } ||
		die "apt-get install chromium failed (see above)"
	find_browser >/dev/null || die "apt-get installed chromium but it is not on PATH"
}

# The tests' start flags, in one place for people reproducing a run by hand.
flags() {
	echo "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run" \
		"--disable-background-networking --disable-component-update --disable-sync" \
		"--user-data-dir=<a fresh temporary directory>"
}

case "${1:-}" in
install) install ;;
path) find_browser || die "no chromium on PATH: run $0 install" ;;
flags) flags ;;
*) die "usage: $0 install | path | flags" ;;
esac
