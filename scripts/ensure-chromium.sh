#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's browser test when it is missing and this
# machine can install packages (root with apt-get). Otherwise it says so; the browser test
# then skips with the reason. Nothing else is downloaded.
set -u
for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: chromium is not installed and cannot be installed here; the dashboard browser test will be skipped"
  exit 0
fi
echo "installing Debian's chromium for the dashboard browser test…"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
  echo "note: chromium could not be installed; the dashboard browser test will be skipped"
fi
exit 0
