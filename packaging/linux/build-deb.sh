#!/usr/bin/env bash
# Build the Linux installers from a PyInstaller onedir bundle: a .deb (dpkg-deb) and a .tar.gz.
#
#   packaging/linux/build-deb.sh BUNDLE_DIR OUT_DIR VERSION VARIANT
#
# BUNDLE_DIR  dist/lookahead-chat (the executable `lookahead-chat` plus _internal/)
# OUT_DIR     where the two files go (dist/)
# VERSION     the app version (0.1.0)
# VARIANT     cpu or cuda: goes into the file names and the package description
#
# DEB_COMPRESSION (zstd, xz, gzip or none; default zstd, which dpkg 1.21.18+ reads: Debian 12,
# Ubuntu 21.10 and later) and DEB_LEVEL (default 9) pick the .deb's compression: zstd -9 packs the
# CPU bundle in about a minute on two cores and xz -6 in over ten, for a file about 20% smaller.
# TAR_GZIP_LEVEL (default 6) is the tarball's.  Prints the two paths at the end.
set -euo pipefail

bundle=${1:?bundle folder}
out=${2:?output folder}
version=${3:?version}
variant=${4:-cpu}
here=$(cd "$(dirname "$0")" && pwd)
icons="$here/../icons"
name=lookahead-chat
arch=amd64
base="$name-$version-linux-x86_64-$variant"

[ -x "$bundle/$name" ] || { echo "error: $bundle/$name is missing: build the bundle first (make package-linux)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/$name-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/root"

# --- file tree ------------------------------------------------------------------------------------
install -d "$root/opt/$name" "$root/usr/bin" "$root/usr/share/applications" "$root/usr/share/doc/$name" \
    "$root/DEBIAN"
cp -a "$bundle/." "$root/opt/$name/"
install -m 0755 "$here/launcher.sh" "$root/usr/bin/$name"
install -m 0644 "$here/$name.desktop" "$root/usr/share/applications/$name.desktop"
for size in 48 128 256; do
    install -D -m 0644 "$icons/$name-$size.png" "$root/usr/share/icons/hicolor/${size}x${size}/apps/$name.png"
done
install -D -m 0644 "$icons/$name.svg" "$root/usr/share/icons/hicolor/scalable/apps/$name.svg"
cat > "$root/usr/share/doc/$name/copyright" <<EOF
Lookahead Chat $version, licensed under the Apache License 2.0
(/usr/share/common-licenses/Apache-2.0).  /opt/$name bundles Python, PyTorch, transformers, Qt
(PySide6, LGPLv3) and their dependencies under their own licenses, which are kept in the
*.dist-info folders under /opt/$name/_internal.
EOF
# dpkg-deb wants sane modes: no group/other write bits anywhere.
chmod -R u+rwX,go+rX,go-w "$root"

# --- control files --------------------------------------------------------------------------------
# Libraries the bundle loads from the system (found with ldd on every ELF file in the bundle on
# Debian 12; PyInstaller leaves out glibc, X11/xcb, GL and font libraries on purpose).  The xcb
# platform plugin of Qt 6.5+ also needs libxcb-cursor0.  Alternatives cover Ubuntu 24.04's t64 names.
# The bundle's Python and extension modules need at least the build machine's glibc.
glibc=$(ldd --version | sed -n '1s/.* \([0-9]\+\.[0-9]\+\)$/\1/p')  # sed reads it all: no SIGPIPE
depends=(
    "libc6 (>= $glibc)"
    "libgl1" "libegl1" "libopengl0"
    "libfontconfig1" "libfreetype6"
    "libglib2.0-0t64 | libglib2.0-0"
    "libdbus-1-3"
    "libx11-6" "libx11-xcb1" "libxext6" "libxrender1"
    "libxkbcommon0" "libxkbcommon-x11-0"
    "libxcb1" "libxcb-cursor0" "libxcb-icccm4" "libxcb-image0" "libxcb-keysyms1" "libxcb-randr0"
    "libxcb-render0" "libxcb-render-util0" "libxcb-shape0" "libxcb-shm0" "libxcb-sync1" "libxcb-xfixes0"
    "libxcb-xinerama0" "libxcb-xkb1" "libxcb-glx0"
)
depends_line=$(IFS=,; echo "${depends[*]}" | sed 's/,/, /g')
installed_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
description="Offline desktop chat with local LLMs, sped up by lookahead decoding"
if [ "$variant" = cuda ]; then
    description="$description (NVIDIA CUDA build)"
else
    description="$description (CPU build)"
fi
cat > "$root/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: Lookahead Chat developers <maintainers@lookahead-chat.invalid>
Installed-Size: $installed_kb
Depends: $depends_line
Recommends: libgtk-3-0t64 | libgtk-3-0, libwayland-client0, libwayland-cursor0, libwayland-egl1
Suggests: g++
Section: utils
Priority: optional
Description: $description
 A Qt desktop app that chats with a local (quantized) LLaMA-family model on
 the CPU or an NVIDIA GPU.  Lookahead decoding generates several tokens per
 model step with exactly the output of plain decoding.  Everything runs
 offline; the default model (SmolLM2-135M-Instruct) is fetched on first use.
EOF
install -m 0755 "$here/postinst" "$root/DEBIAN/postinst"
install -m 0755 "$here/postrm" "$root/DEBIAN/postrm"

# --- .deb -----------------------------------------------------------------------------------------
deb="$out/$base.deb"
compression=${DEB_COMPRESSION:-zstd}
level=()
[ "$compression" = none ] || level=(-z"${DEB_LEVEL:-9}")
dpkg-deb --root-owner-group -Z"$compression" "${level[@]}" --build "$root" "$deb" >/dev/null

# --- .tar.gz: the same bundle, plus the desktop entry and icons for a per-user install ------------
tar_root="$stage/tar/$name-$version"
mkdir -p "$tar_root/share"
cp -a "$bundle/." "$tar_root/"
cp "$here/$name.desktop" "$icons/$name.svg" "$icons/$name-256.png" "$tar_root/share/"
tgz="$out/$base.tar.gz"
tar -C "$stage/tar" --owner=0 --group=0 -cf - "$name-$version" | gzip -"${TAR_GZIP_LEVEL:-6}" > "$tgz"

echo "$deb"
echo "$tgz"
