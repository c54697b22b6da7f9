#!/usr/bin/env bash
# Install a built .deb, test the installed app, uninstall it again.
#
#   packaging/linux/test-installed.sh dist/lookahead-chat-0.1.0-linux-x86_64-cpu.deb
#
# 1. installs it (apt-get resolves the declared dependencies; dpkg -i where apt-get is missing),
# 2. runs `lookahead-chat --self-test` with QT_QPA_PLATFORM=offscreen (fetches the default model
#    into the user's cache first if it is not there),
# 3. calibrates from empty data and compile caches (`ask -v`) and checks that the compiling
#    child processes (the app itself) did not fail,
# 4. opens the window under Xvfb for a few seconds when xvfb-run is installed, with a screenshot in
#    dist/package-test-window.png when ImageMagick's `import` is there too,
# 5. purges the package and checks that /opt/lookahead-chat is gone and that the user's data folder
#    (~/.local/share/lookahead-chat) is as it was.
# KEEP_INSTALLED=1 skips step 5.  Needs root or sudo.
set -euo pipefail

deb=$(realpath "${1:?path of the .deb}")
name=lookahead-chat
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
data_dir="${XDG_DATA_HOME:-$HOME/.local/share}/$name"
shot_dir=$(dirname "$deb")
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

fingerprint() {  # what the user's data folder holds, to compare before and after
    if [ -d "$data_dir" ]; then (cd "$data_dir" && find . -printf '%p %s %T@\n' | sort | sha256sum); else echo absent; fi
}
step "installing $deb"
if command -v apt-get >/dev/null 2>&1; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >/dev/null
else
    "${sudo[@]}" dpkg -i "$deb"
fi
command -v "$name" >/dev/null || { echo "FAIL: $name is not on the PATH after installing" >&2; exit 1; }

step "self-test of the installed app"
QT_QPA_PLATFORM=offscreen "$name" --self-test

step "first-start calibration of the installed app (empty data and compile caches)"
# Calibration compiles two variants' decoding steps side by side, each in a child process that is
# the app itself (`lookahead-chat _compile-step JOB`): the children must compile, not fall back.
scratch=$(mktemp -d)
log="$scratch/ask.log"
LOOKAHEAD_CHAT_HOME="$scratch/home" TORCHINDUCTOR_CACHE_DIR="$scratch/inductor" \
    "$name" -v ask --mode auto --max-new-tokens 16 --stats "Say hello." >"$scratch/answer.txt" 2>"$log" \
    || { tail -20 "$log" >&2; echo "FAIL: ask from empty caches failed" >&2; exit 1; }
grep -E "compiled side by side|calibration [0-9.]+ s" "$log" || true
if grep -q "in a child process failed" "$log"; then grep "in a child process failed" "$log" >&2; echo "FAIL: a compiling child failed" >&2; exit 1; fi
rm -rf "$scratch"

if command -v xvfb-run >/dev/null 2>&1; then
    step "window smoke test under Xvfb"
    shot="$shot_dir/package-test-window.png"
    rm -f "$shot"
    # The app must still be running after 20 s (it would have exited on a start-up error);
    # then the screen is captured and the app is closed.
    xvfb-run -a -s "-screen 0 1280x800x24" bash -c '
        "$0" & pid=$!
        sleep 20
        if ! kill -0 $pid 2>/dev/null; then wait $pid; echo "FAIL: the window closed by itself (exit $?)" >&2; exit 1; fi
        if command -v import >/dev/null 2>&1; then import -window root "$1" || true; fi
        kill $pid; wait $pid 2>/dev/null || true
    ' "$name" "$shot"
    [ -f "$shot" ] && echo "screenshot: $shot"
else
    echo "(xvfb-run is not installed: window smoke test skipped)"
fi

if [ "${KEEP_INSTALLED:-0}" = 1 ]; then
    echo "installed app kept (KEEP_INSTALLED=1)"
    exit 0
fi

step "purging the package"
before=$(fingerprint)  # the app itself may have written there: compare across the purge only
"${sudo[@]}" dpkg --purge "$name" >/dev/null
if [ -e "/opt/$name" ]; then echo "FAIL: /opt/$name is still there after purge" >&2; exit 1; fi
if [ -e "/usr/bin/$name" ]; then echo "FAIL: /usr/bin/$name is still there after purge" >&2; exit 1; fi
if [ "$(fingerprint)" != "$before" ]; then echo "FAIL: the purge changed $data_dir" >&2; exit 1; fi
step "package test passed"
