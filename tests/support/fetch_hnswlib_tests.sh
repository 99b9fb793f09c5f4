#!/usr/bin/env bash
# Fetches hnswlib's own Python tests (tests/python/bindings_test*.py of hnswlib
# 0.8.0) into DEST, for tests/native/test_hnswlib_suite.py, which runs them
# against medretrieve's drop-in. They are never copied into the project.
#
# PyPI's sdists of hnswlib ship no tests; Debian's source package of hnswlib
# is the release tarball, tests included. apt runs on private sources, lists
# and cache in a temporary folder (the machine's apt setup is not changed),
# from the Debian mirror this machine's apt already uses, and checks the
# tarball against the signed source index.
#
# usage: tests/support/fetch_hnswlib_tests.sh DEST
set -euo pipefail
dest=${1:?usage: $0 DEST}
release=trixie  # the Debian release whose hnswlib is 0.8.0, the version tests/native compares against

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mirror=$(apt-get indextargets --format '$(REPO_URI) $(SUITE)' 'Created-By: Packages' | awk '$2 !~ /-/ {print $1; exit}')
[ -n "$mirror" ] || { echo "no Debian mirror in this machine's apt sources" >&2; exit 1; }
echo "deb-src $mirror $release main" >"$work/sources.list"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
apt-get -qq "${apt_private[@]}" update
(cd "$work" && apt-get -qq "${apt_private[@]}" source --download-only --tar-only hnswlib >/dev/null)
tarball=$(ls "$work"/hnswlib_*.orig.tar.*)
mkdir -p "$dest"
tar -xf "$tarball" -C "$dest" --strip-components=3 --wildcards '*/tests/python/bindings_test*.py'
echo "hnswlib's tests from $(basename "$tarball"): $(ls "$dest"/bindings_test*.py | wc -l) files in $dest"
